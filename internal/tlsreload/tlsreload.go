// Package tlsreload serves a TLS identity read from files and follows
// changes to those files without a restart.
//
// cert-manager renews a certificate by updating a Secret; the kubelet then
// writes the new files into a fresh directory and swaps a ..data symlink, so
// a path never changes while its inode and, often, its mtime say nothing
// useful. The Reloader therefore reads the files every interval and compares
// their bytes (a SHA-256 of them) with what it serves: cheap for a few
// kilobytes, and with no inotify watch to lose across a symlink swap.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Files names the PEM files of a server identity.
type Files struct {
	// CertFile and KeyFile are the server certificate (with any
	// intermediates) and its private key. Both are required.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the CAs that verify client
	// certificates, and every client must present one (mutual TLS).
	ClientCAFile string
}

// Options configures a Reloader.
type Options struct {
	// Interval is how often the files are read. Required, positive.
	Interval time.Duration
	// MinVersion is the lowest TLS version served, such as
	// tls.VersionTLS12. Required.
	MinVersion uint16
	// Log receives a line for every reload and every failed one. Required.
	Log *slog.Logger
	// Metrics, when not nil, is told about each reload.
	Metrics *Metrics
}

func (o Options) validate() error {
	var errs []error
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("tlsreload: Options.Interval must be positive, got %s", o.Interval))
	}
	if o.MinVersion == 0 {
		errs = append(errs, errors.New("tlsreload: Options.MinVersion is required"))
	}
	if o.Log == nil {
		errs = append(errs, errors.New("tlsreload: Options.Log is required"))
	}
	return errors.Join(errs...)
}

// Reloader serves the latest good identity read from Files. A change that
// cannot be loaded (a half-written pair, a key that does not match its
// certificate, an unparsable CA bundle) is logged and counted, and the
// previous identity goes on being served.
type Reloader struct {
	files Files
	opts  Options

	// current is read by every handshake and swapped by reload.
	current atomic.Pointer[identity]

	// mu serializes reloads. failedErr is why the files on disk are not
	// served (nil when they are) and failedKey what they held then, so a
	// bad rotation is reported once, not at every poll.
	mu        sync.Mutex
	failedKey [sha256.Size]byte
	failedErr error
}

// identity is one loaded generation of the files.
type identity struct {
	sum    [sha256.Size]byte
	leaf   *x509.Certificate
	config *tls.Config
}

// New loads the files once and fails if they do not make a usable identity.
func New(files Files, opts Options) (*Reloader, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tlsreload: Files.CertFile and Files.KeyFile are required")
	}
	r := &Reloader{files: files, opts: opts}
	id, err := r.load()
	if err != nil {
		return nil, err
	}
	r.current.Store(id)
	r.opts.Metrics.loaded(id.leaf)
	return r, nil
}

// ServerConfig returns the tls.Config to serve with. It picks the current
// identity at every handshake, so a reload reaches each new connection;
// connections already open keep the identity they started with.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: r.opts.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current.Load().config, nil
		},
	}
}

// Run checks the files every interval until ctx ends.
func (r *Reloader) Run(ctx context.Context) {
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = r.Reload()
		}
	}
}

// Reload reads the files once. It reports whether a new identity is now
// served, and why the files on disk are not (nil when they are).
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw, err := r.read()
	key := raw.sum()
	if err != nil {
		// A file that stays unreadable is reported once, like bad content.
		key = sha256.Sum256([]byte(err.Error()))
	}
	if err == nil && key == r.current.Load().sum {
		if r.failedErr != nil {
			r.failedErr = nil
			r.opts.Metrics.recovered()
			r.opts.Log.Info("gRPC TLS files are back to the ones served")
		}
		return false, nil
	}
	if r.failedErr != nil && key == r.failedKey {
		return false, r.failedErr
	}
	if err == nil {
		var id *identity
		if id, err = raw.parse(r.opts.MinVersion); err == nil {
			r.current.Store(id)
			r.failedErr = nil
			r.opts.Metrics.loaded(id.leaf)
			r.opts.Log.Info("gRPC TLS files changed; serving the new certificate to new connections",
				"subject", id.leaf.Subject.String(), "serial", id.leaf.SerialNumber.Text(16),
				"notAfter", id.leaf.NotAfter, "clientCA", r.files.ClientCAFile != "")
			return true, nil
		}
	}
	r.failedKey, r.failedErr = key, err
	r.opts.Metrics.failed()
	r.opts.Log.Warn("gRPC TLS files changed but cannot be loaded; still serving the previous certificate",
		"err", err, "serial", r.current.Load().leaf.SerialNumber.Text(16))
	return false, err
}

func (r *Reloader) load() (*identity, error) {
	raw, err := r.read()
	if err != nil {
		return nil, err
	}
	return raw.parse(r.opts.MinVersion)
}

// contents are the bytes of the files, read at one moment.
type contents struct {
	cert, key, clientCA []byte
}

func (r *Reloader) read() (contents, error) {
	var c contents
	var err error
	if c.cert, err = readFile(r.files.CertFile); err != nil {
		return c, err
	}
	if c.key, err = readFile(r.files.KeyFile); err != nil {
		return c, err
	}
	if r.files.ClientCAFile != "" {
		if c.clientCA, err = readFile(r.files.ClientCAFile); err != nil {
			return c, err
		}
	}
	return c, nil
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator configured these paths
	if err != nil {
		return nil, fmt.Errorf("tlsreload: %w", err)
	}
	return b, nil
}

func (c contents) sum() [sha256.Size]byte {
	// Lengths go in too, so moving bytes from one file to the next changes
	// the sum.
	return sha256.Sum256(bytes.Join([][]byte{
		fmt.Appendf(nil, "%d,%d,%d", len(c.cert), len(c.key), len(c.clientCA)), c.cert, c.key, c.clientCA,
	}, []byte{0}))
}

// parse builds the per-connection configuration of one identity.
func (c contents) parse(minVersion uint16) (*identity, error) {
	cert, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("tlsreload: certificate and key: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   minVersion,
		Certificates: []tls.Certificate{cert},
		// GetConfigForClient's answer replaces the whole server config, so
		// the ALPN protocol gRPC clients insist on must be named here.
		NextProtos: []string{"h2"},
		// No resumption: every connection is verified against the client
		// CAs served now, whatever a Go release's rules for resumed
		// sessions are; gRPC connections live long, so a full handshake
		// costs nothing worth saving.
		SessionTicketsDisabled: true,
	}
	if c.clientCA != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.clientCA) {
			return nil, errors.New("tlsreload: client CA file holds no PEM certificate")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return &identity{sum: c.sum(), leaf: cert.Leaf, config: cfg}, nil
}
