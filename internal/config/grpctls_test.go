package config_test

import (
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// tlsFiles are real PEM files for the gRPC TLS settings.
type tlsFiles struct {
	cert, key, ca, otherKey, notPEM string
}

func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	ca := tlstest.NewCA(t, "ca")
	pair, other := ca.Server(t), ca.Server(t)
	return tlsFiles{
		cert:     writeFile(t, "tls.crt", string(pair.CertPEM)),
		key:      writeFile(t, "tls.key", string(pair.KeyPEM)),
		ca:       writeFile(t, "ca.crt", string(ca.CertPEM)),
		otherKey: writeFile(t, "other.key", string(other.KeyPEM)),
		notPEM:   writeFile(t, "junk.crt", "not a certificate"),
	}
}

func TestGRPCTLSIsOffByDefault(t *testing.T) {
	t.Parallel()
	c := valid()
	require.False(t, c.GRPC.TLS.Enabled())
	require.False(t, c.GRPC.TLS.Mutual())
	require.Equal(t, 10*time.Second, c.GRPC.TLS.ReloadInterval)
	require.Equal(t, uint16(tls.VersionTLS12), c.GRPC.TLS.TLSVersion())
}

func TestValidateAcceptsGRPCTLSAndMutualTLSWithMatchingFiles(t *testing.T) {
	t.Parallel()
	f := writeTLSFiles(t)
	c := valid()
	c.GRPC.TLS.CertFile, c.GRPC.TLS.KeyFile = f.cert, f.key
	require.NoError(t, c.Validate(), "TLS")
	require.True(t, c.GRPC.TLS.Enabled())

	c.GRPC.TLS.ClientCAFile, c.GRPC.TLS.MinVersion = f.ca, "1.3"
	require.NoError(t, c.Validate(), "mutual TLS")
	require.True(t, c.GRPC.TLS.Mutual())
	require.Equal(t, uint16(tls.VersionTLS13), c.GRPC.TLS.TLSVersion())
}

func TestValidateRejectsEachBadGRPCTLSFieldByName(t *testing.T) {
	t.Parallel()
	f := writeTLSFiles(t)
	missing := filepath.Join(t.TempDir(), "missing.crt")
	tests := map[string]struct {
		tls  config.GRPCTLS
		want string
	}{
		"cert without key":      {config.GRPCTLS{CertFile: f.cert}, "grpc.tls.keyFile: must be set together with grpc.tls.certFile, or neither"},
		"key without cert":      {config.GRPCTLS{KeyFile: f.key}, "grpc.tls.certFile: must be set together with grpc.tls.keyFile, or neither"},
		"client CA without TLS": {config.GRPCTLS{ClientCAFile: f.ca}, "grpc.tls.clientCAFile: requires grpc.tls.certFile and grpc.tls.keyFile"},
		"missing cert file": {config.GRPCTLS{CertFile: missing, KeyFile: f.key},
			`grpc.tls.certFile: must name a readable file: "` + missing + `": no such file or directory`},
		"missing client CA file": {config.GRPCTLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: missing},
			"grpc.tls.clientCAFile: must name a readable file"},
		"key of another certificate": {config.GRPCTLS{CertFile: f.cert, KeyFile: f.otherKey},
			"grpc.tls.certFile: with grpc.tls.keyFile must be a PEM certificate and its matching private key: private key does not match public key"},
		"certificate that is not PEM": {config.GRPCTLS{CertFile: f.notPEM, KeyFile: f.key},
			"grpc.tls.certFile: with grpc.tls.keyFile must be a PEM certificate and its matching private key"},
		"client CA that is not PEM": {config.GRPCTLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.notPEM},
			`grpc.tls.clientCAFile: must hold at least one PEM certificate, "` + f.notPEM + `" has none`},
		"zero reload interval": {config.GRPCTLS{ReloadInterval: -1}, `grpc.tls.reloadInterval: must be a positive duration such as 10s, got "-1ns"`},
		"TLS 1.1":              {config.GRPCTLS{MinVersion: "1.1"}, `grpc.tls.minVersion: must be one of "1.2", "1.3", got "1.1"`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			if tt.tls.ReloadInterval == 0 {
				tt.tls.ReloadInterval = time.Second
			}
			if tt.tls.MinVersion == "" {
				tt.tls.MinVersion = "1.2"
			}
			c.GRPC.TLS = tt.tls
			err := c.Validate()
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestGRPCTLSComesFromTheFileEnvAndFlags(t *testing.T) {
	t.Parallel()
	f := writeTLSFiles(t)
	file := `
grpc:
  tls:
    certFile: ` + f.cert + `
    keyFile: ` + f.key + `
    clientCAFile: ` + f.ca + `
    reloadInterval: 30s
    minVersion: "1.3"
redis:
  - name: default
    addr: r:6379
`
	cfg, err := config.Load(sources(nil, map[string]string{"/etc/p.yaml": file}), parseFlags(t, "--config", "/etc/p.yaml"))
	require.NoError(t, err)
	require.Equal(t, config.GRPCTLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, ReloadInterval: 30 * time.Second, MinVersion: "1.3"}, cfg.GRPC.TLS)

	env := map[string]string{
		"PELWARDEN_REDIS_ADDR":               "r:6379",
		"PELWARDEN_GRPC_TLS_CERT_FILE":       f.cert,
		"PELWARDEN_GRPC_TLS_KEY_FILE":        f.key,
		"PELWARDEN_GRPC_TLS_RELOAD_INTERVAL": "1m",
		"PELWARDEN_GRPC_TLS_MIN_VERSION":     "1.3",
	}
	cfg, err = config.Load(sources(env, nil), parseFlags(t, "--grpc-tls-client-ca", f.ca))
	require.NoError(t, err)
	require.Equal(t, config.GRPCTLS{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, ReloadInterval: time.Minute, MinVersion: "1.3"}, cfg.GRPC.TLS)

	cfg, err = config.Load(sources(nil, nil), parseFlags(t, "--redis-addr", "r:6379", "--grpc-tls-cert", f.cert, "--grpc-tls-key", f.key))
	require.NoError(t, err)
	require.True(t, cfg.GRPC.TLS.Enabled())
	require.False(t, cfg.GRPC.TLS.Mutual())
}
