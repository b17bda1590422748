package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TLS makes a Server speak TLS only: the plaintext port is closed (--port 0)
// and the server listens with --tls-port on the port Addr reports.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM). The
	// certificate must name 127.0.0.1, the address the harness dials.
	CertFile, KeyFile string
	// CAFile verifies client certificates (--tls-ca-cert-file) and, for the
	// harness's own connections, the server: one test CA signs both.
	CAFile string
	// AuthClients is --tls-auth-clients: "yes" (Redis's default when
	// empty) refuses clients without a certificate, "optional" verifies one
	// only if sent, "no" asks for none.
	AuthClients string
	// ClientCertFile and ClientKeyFile are what the harness presents (its
	// readiness probe and Client); needed when AuthClients is yes.
	ClientCertFile, ClientKeyFile string
}

// args returns the listening directives: TLS on port, plaintext off.
func (t *TLS) args(port int) []string {
	args := []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", t.CertFile,
		"--tls-key-file", t.KeyFile,
		"--tls-ca-cert-file", t.CAFile,
	}
	if t.AuthClients != "" {
		args = append(args, "--tls-auth-clients", t.AuthClients)
	}
	return args
}

// clientConfig is the tls.Config the harness connects with.
func (t *TLS) clientConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("TLS.CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS.CAFile %s holds no PEM certificate", t.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: "127.0.0.1"}
	if t.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS.ClientCertFile/ClientKeyFile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// userArgs turns ACL rules into --user directives. redis-server quotes each
// command-line word on its own, so a rule is split into its words.
func userArgs(users []string) ([]string, error) {
	var args []string
	for _, u := range users {
		words := strings.Fields(u)
		if len(words) == 0 {
			return nil, errors.New("empty ACL user rule")
		}
		args = append(append(args, "--user"), words...)
	}
	return args, nil
}
