package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// firstInstallDir holds the first install: the chart's examples.
var firstInstallDir = filepath.Join("..", "charts", "pelwarden", "examples")

// TestTheOpenSSLRecipeMakesTheSecretsPelwardenAndKEDAHandshakeWith runs
// the first install's openssl recipe as written, with kubectl standing in
// for the cluster (it records the Secrets the recipe creates), then
// serves pelwarden's gRPC port from the Secret grpc.tls.secretName names,
// as the chart mounts it, and dials it the way KEDA's external scaler does
// with the TriggerAuthentication's parameters from the other Secret,
// checking the host of scalerAddress: mutual TLS is agreed and a poll is
// answered. Without the client certificate, or for another host, the
// handshake fails.
func TestTheOpenSSLRecipeMakesTheSecretsPelwardenAndKEDAHandshakeWith(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("openssl")
	require.NoError(t, err, "the recipe needs openssl on PATH (Debian: apt-get install openssl)")
	secrets := runOpenSSLRecipe(t)
	fi := readFirstInstallObjects(t)
	server := secrets[fi.releaseNS+"/"+fi.serverSecret]
	client := secrets[fi.namespace+"/"+fi.clientSecret]
	require.NotNil(t, server, "the recipe creates %s in %s: %v", fi.serverSecret, fi.releaseNS, secrets)
	require.NotNil(t, client, "the recipe creates %s in %s", fi.clientSecret, fi.namespace)

	srv := redistest.Start(t)
	redistest.Hold(t, srv.Client(t), "jobs", "workers", "w-0", "", 2)
	mount := t.TempDir() // the Secret's keys, as the chart mounts them
	for k, v := range server {
		require.NoError(t, os.WriteFile(filepath.Join(mount, k), v, 0o600))
	}
	cfg := testConfig(srv.Addr())
	cfg.GRPC.TLS = config.GRPCTLS{CertFile: filepath.Join(mount, "tls.crt"), KeyFile: filepath.Join(mount, "tls.key"),
		ClientCAFile: filepath.Join(mount, "ca.crt"), ReloadInterval: time.Minute, MinVersion: "1.2"}
	kedaTLS := func(withCert bool, host string) credentials.TransportCredentials {
		c := &tls.Config{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool(), ServerName: host}
		require.True(t, c.RootCAs.AppendCertsFromPEM(client[fi.params["caCert"]]))
		if withCert {
			pair, err := tls.X509KeyPair(client[fi.params["tlsClientCert"]], client[fi.params["tlsClientKey"]])
			require.NoError(t, err)
			c.Certificates = []tls.Certificate{pair}
		}
		return credentials.NewTLS(c)
	}
	p := runPelwarden(t, cfg, kedaTLS(true, fi.scalerHost))
	md := map[string]string{"scalerAddress": fi.scalerAddress, "stream": "jobs", "consumerGroup": "workers"}
	requireMetric(t, p, md, 2)

	for name, creds := range map[string]credentials.TransportCredentials{
		"without KEDA's client certificate": kedaTLS(false, fi.scalerHost),
		"for a host the certificate lacks":  kedaTLS(true, "pelwarden.elsewhere.svc"),
	} {
		conn, err := grpc.NewClient(p.app.GRPCAddr(), grpc.WithTransportCredentials(creds))
		require.NoError(t, err)
		_, err = externalscaler.NewExternalScalerClient(conn).GetMetricSpec(context.Background(), ref(md))
		require.Equal(t, codes.Unavailable, status.Code(err), "%s: the handshake fails: %v", name, err)
		require.NoError(t, conn.Close())
	}
}

// runOpenSSLRecipe runs tls-openssl.sh in a directory of its own with a
// kubectl that records each Secret the recipe creates, and returns the
// Secrets by namespace/name, each key's bytes read from its file.
func runOpenSSLRecipe(t *testing.T) map[string]map[string][]byte {
	t.Helper()
	dir, bin := t.TempDir(), t.TempDir()
	log := filepath.Join(bin, "kubectl.log")
	stub := "#!/bin/sh\nprintf '%s\\n' \"$*\" >>" + log + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "kubectl"), []byte(stub), 0o700))
	script, err := filepath.Abs(filepath.Join(firstInstallDir, "tls-openssl.sh"))
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), "bash", script)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the recipe runs as written:\n%s", out)
	calls, err := os.ReadFile(log)
	require.NoError(t, err, "the recipe creates Secrets with kubectl")
	secrets := map[string]map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 6, line)
		require.Equal(t, []string{"-n", "create", "secret", "generic"}, []string{f[0], f[2], f[3], f[4]}, line)
		data := map[string][]byte{}
		for _, arg := range f[6:] {
			spec, ok := strings.CutPrefix(arg, "--from-file=")
			require.True(t, ok, "%s: only --from-file", line)
			key, file, found := strings.Cut(spec, "=")
			if !found {
				key, file = filepath.Base(spec), spec
			}
			data[key], err = os.ReadFile(filepath.Join(dir, file))
			require.NoError(t, err, line)
		}
		secrets[f[1]+"/"+f[5]] = data
	}
	return secrets
}

// firstInstallObjects is what the first install's files name: where the
// ScaledObject is and what it dials, the TriggerAuthentication's Secret
// and its parameters' keys, and grpc.tls.secretName.
type firstInstallObjects struct {
	namespace, scalerAddress, scalerHost, releaseNS string
	clientSecret, serverSecret                      string
	params                                          map[string]string // parameter -> Secret key
}

func readFirstInstallObjects(t *testing.T) firstInstallObjects {
	t.Helper()
	var so struct {
		Metadata struct{ Namespace string }
		Spec     struct {
			Triggers []struct{ Metadata map[string]string }
		}
	}
	var ta struct {
		Spec struct {
			SecretTargetRef []struct{ Parameter, Name, Key string } `yaml:"secretTargetRef"`
		}
	}
	var values struct {
		GRPC struct {
			TLS struct {
				SecretName string `yaml:"secretName"`
			}
		} `yaml:"grpc"`
	}
	for name, into := range map[string]any{"scaledobject.yaml": &so, "triggerauthentication.yaml": &ta, "values.yaml": &values} {
		raw, err := os.ReadFile(filepath.Join(firstInstallDir, name))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(raw, into), name)
	}
	fi := firstInstallObjects{namespace: so.Metadata.Namespace, scalerAddress: so.Spec.Triggers[0].Metadata["scalerAddress"],
		serverSecret: values.GRPC.TLS.SecretName, params: map[string]string{}}
	var err error
	fi.scalerHost, _, err = net.SplitHostPort(fi.scalerAddress)
	require.NoError(t, err)
	fi.releaseNS = strings.Split(fi.scalerHost, ".")[1] // <release>.<namespace>.svc
	for _, r := range ta.Spec.SecretTargetRef {
		fi.clientSecret, fi.params[r.Parameter] = r.Name, r.Key
	}
	return fi
}
