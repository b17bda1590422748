package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
)

// tlsVersions maps grpc.tls.minVersion to crypto/tls versions.
var tlsVersions = map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}

// TLSVersion returns MinVersion as a crypto/tls version, or 0 when it is
// not one Validate accepts.
func (t GRPCTLS) TLSVersion() uint16 { return tlsVersions[t.MinVersion] }

// validate checks the gRPC TLS files at load time, so that a wrong path, a
// key that does not match its certificate or an empty CA bundle is a
// configuration error naming its field, not a failure at the first
// handshake.
func (t *GRPCTLS) validate(p *problems, path string) {
	checkPositive(p, path+".reloadInterval", t.ReloadInterval, "10s")
	if t.TLSVersion() == 0 {
		p.add(path+".minVersion", `must be one of "1.2", "1.3", got %q`, t.MinVersion)
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		p.add(path+".keyFile", "must be set together with %s.certFile, or neither", path)
	case t.CertFile == "" && t.KeyFile != "":
		p.add(path+".certFile", "must be set together with %s.keyFile, or neither", path)
	}
	if t.ClientCAFile != "" && (t.CertFile == "" || t.KeyFile == "") {
		p.add(path+".clientCAFile", "requires %[1]s.certFile and %[1]s.keyFile: mutual TLS needs the server's own certificate too", path)
	}
	before := len(*p)
	checkReadable(p, path+".certFile", t.CertFile)
	checkReadable(p, path+".keyFile", t.KeyFile)
	checkReadable(p, path+".clientCAFile", t.ClientCAFile)
	if len(*p) > before {
		return // the files cannot be read; their content says nothing more
	}
	if t.CertFile != "" && t.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			p.addFile(path+".certFile", "with %s.keyFile must be a PEM certificate and its matching private key: %s",
				path, strings.TrimPrefix(err.Error(), "tls: "))
		}
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			p.addFile(path+".clientCAFile", "must hold at least one PEM certificate, %q has none", t.ClientCAFile)
		}
	}
}
