// Package tlstest makes throwaway certificate authorities, server and client
// certificates for tests, and writes them the way Kubernetes mounts a Secret,
// so rotation can be tested the way cert-manager rotates in a cluster.
//
// Keys are ECDSA P-256: quick to generate, and accepted by Go, gRPC and
// redis-server (OpenSSL) alike.
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"
)

// validity is how long every certificate made here is valid. NotBefore lies
// a minute in the past so that clock steps between processes do not matter.
const validity = 24 * time.Hour

// CA is a self-signed certificate authority.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: the content of a ca.crt.
	CertPEM []byte
	key     crypto.Signer
}

// Pair is a certificate with its private key.
type Pair struct {
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the contents of tls.crt and tls.key.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA whose common name is name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := template(tb, name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	cert, certPEM := sign(tb, tmpl, tmpl, key.Public(), key)
	return &CA{Cert: cert, CertPEM: certPEM, key: key}
}

// Server issues a server certificate for hosts: each host that parses as an
// IP address becomes an IP SAN, any other a DNS SAN. With no hosts it is
// issued for 127.0.0.1 and localhost, which loopback tests dial.
func (ca *CA) Server(tb testing.TB, hosts ...string) Pair {
	tb.Helper()
	return ca.issue(tb, hostTemplate(tb, hosts, x509.ExtKeyUsageServerAuth))
}

// Peer issues a certificate for hosts, as Server does, that is also good
// for client authentication: one identity for both ends of mutual TLS,
// as KEDA's operator and its metrics adapter share one.
func (ca *CA) Peer(tb testing.TB, hosts ...string) Pair {
	tb.Helper()
	return ca.issue(tb, hostTemplate(tb, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
}

func hostTemplate(tb testing.TB, hosts []string, usage ...x509.ExtKeyUsage) *x509.Certificate {
	tb.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	tmpl := template(tb, hosts[0])
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.ExtKeyUsage = usage
	return tmpl
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(tb testing.TB, cn string) Pair {
	tb.Helper()
	return ca.ClientWithSANs(tb, cn, nil)
}

// ClientWithSANs issues a client certificate with common name cn and the
// given DNS and URI SANs, the identities an mTLS peer can be known by.
func (ca *CA) ClientWithSANs(tb testing.TB, cn string, dns []string, uris ...string) Pair {
	tb.Helper()
	tmpl := template(tb, cn)
	tmpl.DNSNames = dns
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			tb.Fatalf("tlstest: URI SAN %q: %v", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tb, tmpl)
}

// Pool returns a pool that holds only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ClientConfig returns the tls.Config of a client that trusts only this CA
// and presents the certificates of pairs, if any.
func (ca *CA) ClientConfig(tb testing.TB, pairs ...Pair) *tls.Config {
	tb.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	for _, p := range pairs {
		cfg.Certificates = append(cfg.Certificates, p.TLS(tb))
	}
	return cfg
}

// TLS returns the pair as a tls.Certificate.
func (p Pair) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		tb.Fatalf("tlstest: key pair: %v", err)
	}
	return c
}

func (ca *CA) issue(tb testing.TB, tmpl *x509.Certificate) Pair {
	tb.Helper()
	key := newKey(tb)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, certPEM := sign(tb, tmpl, ca.Cert, key.Public(), ca.key)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("tlstest: marshal key: %v", err)
	}
	return Pair{Cert: cert, CertPEM: certPEM, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("tlstest: generate key: %v", err)
	}
	return key
}

// template is a certificate valid from a minute ago with a random serial, so
// that every certificate made in a test can be told apart by its serial.
func template(tb testing.TB, cn string) *x509.Certificate {
	tb.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		tb.Fatalf("tlstest: serial: %v", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"pelwarden tests"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
	}
}

func sign(tb testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, []byte) {
	tb.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		tb.Fatalf("tlstest: create certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("tlstest: parse certificate: %v", err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
