package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// Admin configures who may call the mutating RPCs of pelwarden.v1.Admin
// (Reclaim, DeleteConsumer, Deregister). Read RPCs are open to whoever can
// reach grpc.addr. With neither field set the mutating RPCs are refused, so
// a pelwarden nobody configured for it cannot be made to move entries.
type Admin struct {
	// TokenFile is the path of a file holding the bearer token that callers
	// send as `authorization: Bearer <token>`, such as a mounted Kubernetes
	// Secret. Surrounding whitespace is trimmed; the token must be at least
	// 16 characters. The file is read again when it changes, so a rotated
	// Secret takes effect without a restart. Optional; default none.
	TokenFile string `yaml:"tokenFile"`
	// AllowedClientIdentities lists the mTLS client certificate identities
	// allowed to mutate: a verified client certificate's subject common
	// name, or one of its DNS or URI SANs (such as
	// spiffe://cluster.local/ns/jobs/sa/worker). Only a gRPC listener that
	// verifies client certificates can present one. Optional; default none;
	// each entry is non-empty and has no spaces.
	AllowedClientIdentities []string `yaml:"allowedClientIdentities"`
	// WorkerTokenFile is the path of a file holding the workers' bearer
	// token, read like TokenFile. It allows Deregister and nothing else, so
	// a worker's pod does not hold the operator's token. Optional; default
	// none; it must differ from the token of TokenFile.
	WorkerTokenFile string `yaml:"workerTokenFile"`
	// WorkerTokens are workers' bearer tokens scoped to streams: each allows
	// Deregister only of consumers of groups on the streams its globs
	// match, so the workers of one application cannot give back another's
	// entries. Beside WorkerTokenFile, whose token reaches every stream.
	// Optional; default none; only in the configuration file (a list of
	// objects has no flag). Each token must differ from every other one
	// pelwarden accepts.
	WorkerTokens []WorkerToken `yaml:"workerTokens"`
	// WorkerIdentityPrefix makes verified mTLS client certificates worker
	// credentials bound to one consumer: a certificate with a URI SAN
	// <prefix><consumer>, such as spiffe://cluster.local/pelwarden/worker/
	// followed by the pod's name, may Deregister that consumer and no
	// other, and nothing else. Optional; default none; a URI of 1-1024
	// characters without spaces.
	WorkerIdentityPrefix string `yaml:"workerIdentityPrefix"`
}

// WorkerToken is one workers' bearer token and the streams it reaches.
type WorkerToken struct {
	// TokenFile is the path of the file holding the token, read like
	// admin.tokenFile. Required.
	TokenFile string `yaml:"tokenFile"`
	// Streams are path.Match globs (`*`, `?`, `[a-z]`) of the streams whose
	// groups the token may Deregister consumers of. At least one.
	Streams []string `yaml:"streams"`
}

// Enabled reports whether any credential is configured.
func (a Admin) Enabled() bool {
	return a.TokenFile != "" || len(a.AllowedClientIdentities) > 0 || a.WorkerTokenFile != "" || a.WorkerIdentityPrefix != "" ||
		len(a.WorkerTokens) > 0
}

// AcceptsBearerTokens reports whether any token file is configured.
func (a Admin) AcceptsBearerTokens() bool {
	return a.TokenFile != "" || a.WorkerTokenFile != "" || len(a.WorkerTokens) > 0
}

// MinTokenLength is the shortest bearer token accepted: guessing 16
// random characters over the network is hopeless.
const MinTokenLength = 16

// maxTokenFile bounds what is read of a token file.
const maxTokenFile = 4096

// ReadToken reads a bearer token file: a regular file (a device such as
// /dev/zero would never end) holding one token of at least MinTokenLength
// characters, without inner whitespace.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator configured this path
	if err != nil {
		return "", errors.New(pathErrText(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", errors.New(pathErrText(err))
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%q is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", errors.New(pathErrText(err))
	}
	token := strings.TrimSpace(string(data))
	switch {
	case len(data) > maxTokenFile:
		return "", fmt.Errorf("%q is larger than %d bytes; it must hold one token", path, maxTokenFile)
	case len(token) < MinTokenLength:
		return "", fmt.Errorf("%q must hold a token of at least %d characters (such as the output of `openssl rand -hex 32`), it holds %d", path, MinTokenLength, len(token))
	case strings.ContainsFunc(token, unicode.IsSpace):
		return "", fmt.Errorf("%q must hold one token without spaces or line breaks inside it", path)
	}
	return token, nil
}

func (c *Config) validateAdmin(p *problems) {
	a := c.Admin
	if a.TokenFile != "" {
		if _, err := ReadToken(a.TokenFile); err != nil {
			p.addFile("admin.tokenFile", "must name a readable file holding the bearer token: %v", err)
		}
	}
	// seen maps each readable token to the field that holds it first: one
	// token in two places would get the scope of whichever is checked first.
	seen := map[string]string{}
	if operator, err := ReadToken(a.TokenFile); a.TokenFile != "" && err == nil {
		seen[operator] = "admin.tokenFile"
	}
	if a.WorkerTokenFile != "" {
		worker, err := ReadToken(a.WorkerTokenFile)
		switch {
		case err != nil:
			p.addFile("admin.workerTokenFile", "must name a readable file holding the workers' bearer token: %v", err)
		case seen[worker] != "":
			p.add("admin.workerTokenFile", "must hold a token other than admin.tokenFile's: the worker token allows only Deregister")
		default:
			seen[worker] = "admin.workerTokenFile"
		}
	}
	for i, w := range a.WorkerTokens {
		at := fmt.Sprintf("admin.workerTokens[%d]", i)
		checkGlobs(p, at+".streams", w.Streams, true)
		token, err := ReadToken(w.TokenFile)
		switch {
		case w.TokenFile == "":
			p.add(at+".tokenFile", "is required: the path of a file holding a workers' bearer token")
		case err != nil:
			p.addFile(at+".tokenFile", "must name a readable file holding a workers' bearer token: %v", err)
		case seen[token] != "":
			p.add(at+".tokenFile", "must hold a token other than %s's: each token has one scope", seen[token])
		default:
			seen[token] = at + ".tokenFile"
		}
	}
	if w := a.WorkerIdentityPrefix; w != "" && (len(w) > 1024 || !strings.Contains(w, ":") || strings.ContainsFunc(w, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })) {
		p.add("admin.workerIdentityPrefix", "must be the start of a URI SAN of 1-1024 characters without spaces, such as %q, got %q",
			"spiffe://cluster.local/pelwarden/worker/", w)
	}
	for i, id := range a.AllowedClientIdentities {
		if id == "" || len(id) > 1024 || strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			p.add(fmt.Sprintf("admin.allowedClientIdentities[%d]", i),
				"must be a certificate common name, DNS name or URI of 1-1024 characters without spaces, such as %q, got %q",
				"pelwarden-admin", id)
		}
	}
}
