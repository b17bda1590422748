package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/tlstest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// A connection that fails in its TLS handshake says which flag it wants,
// since gRPC's message names only the symptom: a pelwarden over mutual
// TLS, whose certificate names its Service, reached through a
// port-forward.
func TestATLSHandshakeFailureNamesTheFlagItWants(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "cli")
	server := ca.Server(t, "pelwarden.pelwarden.svc")
	client := ca.Client(t, "operator")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{server.TLS(t)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	})))
	pelwardenv1.RegisterAdminServer(srv, &cannedAdmin{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	_, port, err := net.SplitHostPort(lis.Addr().String())
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o600))
		return path
	}
	caFile, cert, key := write("ca.crt", ca.CertPEM), write("tls.crt", client.CertPEM), write("tls.key", client.KeyPEM)
	base := []string{"status", "--server", "localhost:" + port, "--timeout", "5s"}
	for name, tc := range map[string]struct {
		flags []string
		hint  string // "" when the call succeeds
	}{
		"no TLS at all":             {nil, "pelwarden may serve TLS: pass --tls-ca"},
		"the system roots":          {[]string{"--tls", "--tls-server-name", "pelwarden.pelwarden.svc"}, "pass the CA that signed pelwarden's certificate with --tls-ca"},
		"the Service's name unsaid": {[]string{"--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key}, "pass the name it holds with --tls-server-name"},
		"no client certificate":     {[]string{"--tls-ca", caFile, "--tls-server-name", "pelwarden.pelwarden.svc"}, "pass --tls-cert and --tls-key"},
		"every flag it needs":       {[]string{"--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key, "--tls-server-name", "pelwarden.pelwarden.svc"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runAdmin(t, nil, append(append([]string{}, base...), tc.flags...)...)
			if tc.hint == "" {
				require.Equal(t, exitOK, r.code, r.stderr)
				return
			}
			require.Equal(t, exitFailure, r.code)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			require.Len(t, lines, 2, "the error, then the hint: %s", r.stderr)
			require.Contains(t, lines[1], tc.hint)
		})
	}
}

// TestAClientWithoutACertificateThatSeesTheServerHangsUpIsToldToPassOne:
// under TLS 1.3 the server checks the client's certificate after the
// client's side of the handshake is done, so a client without one may see
// a broken pipe, a reset or EOF instead of the server's alert. It is told
// the same flags; a client that sent a certificate is not, nor is one
// that spoke no TLS told why the server hung up.
func TestAClientWithoutACertificateThatSeesTheServerHangsUpIsToldToPassOne(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		`connection error: desc = "transport: failed to write client preface: write tcp 127.0.0.1:53768->127.0.0.1:39259: write: broken pipe"`,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:53768->127.0.0.1:39259: read: connection reset by peer"`,
		`connection error: desc = "error reading server preface: EOF"`,
	} {
		err := status.Error(codes.Unavailable, msg)
		noCert := clientFlags{tlsOn: true, ca: "ca.crt"}
		require.Contains(t, noCert.tlsHint(err), "pass --tls-cert and --tls-key", msg)
		withCert := clientFlags{tlsOn: true, ca: "ca.crt", cert: "tls.crt", key: "tls.key"}
		require.Empty(t, withCert.tlsHint(err), "a client that sent a certificate: %s", msg)
		require.NotContains(t, (&clientFlags{}).tlsHint(err), "closed the connection", "a client that spoke no TLS: %s", msg)
		require.Empty(t, noCert.tlsHint(status.Error(codes.DeadlineExceeded, msg)), "not a failed connection")
	}
}
