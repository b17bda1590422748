// Package redisx is pelwarden's Redis adapter: named connections, the
// one-round-trip read of a target, and the stream waker. It does I/O and
// reports what it saw; it decides nothing.
package redisx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
)

// NewClient builds a client for one configured connection. Context
// deadlines are honored on every socket operation, so a caller's deadline
// bounds a call even while Redis is unreachable.
func NewClient(c config.Redis) (*redis.Client, error) {
	opts := &redis.Options{
		Addr:                  c.Addr,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		DialTimeout:           c.DialTimeout,
		ReadTimeout:           c.ReadTimeout,
		WriteTimeout:          c.WriteTimeout,
		PoolSize:              c.PoolSize,
		ClientName:            "pelwarden",
		ContextTimeoutEnabled: true,
		// CLIENT SETINFO is unknown before Redis 7.2; skip the extra call.
		DisableIdentity: true,
	}
	if c.TLS.Enabled {
		tc, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, fmt.Errorf("redis connection %q: %w", c.Name, err)
		}
		opts.TLSConfig = tc
	}
	return redis.NewClient(opts), nil
}

func tlsConfig(t config.RedisTLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit, documented operator choice
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.caFile: no PEM certificate in %s", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.certFile/keyFile: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Conns holds the configured connections by name.
type Conns struct {
	clients map[string]*redis.Client
}

// Open builds a client for every configured connection. It does not dial:
// readiness reports reachability, and a Redis that is down at start must not
// stop pelwarden from serving errors for it.
func Open(cfgs []config.Redis) (*Conns, error) {
	cs := &Conns{clients: make(map[string]*redis.Client, len(cfgs))}
	for _, c := range cfgs {
		cl, err := NewClient(c)
		if err != nil {
			_ = cs.Close()
			return nil, err
		}
		cs.clients[c.Name] = cl
	}
	return cs, nil
}

// Get returns the client of a named connection.
func (cs *Conns) Get(name string) (*redis.Client, bool) {
	c, ok := cs.clients[name]
	return c, ok
}

// Names lists the configured connection names, sorted.
func (cs *Conns) Names() []string {
	names := make([]string, 0, len(cs.clients))
	for n := range cs.clients {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Ping checks every connection and returns the failures, naming each.
func (cs *Conns) Ping(ctx context.Context) error {
	var errs []error
	for _, name := range cs.Names() {
		if err := cs.clients[name].Ping(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("redis %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes every client.
func (cs *Conns) Close() error {
	var errs []error
	for _, c := range cs.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// slogPrintf routes go-redis's own log lines (dial retries and the like) to
// the process logger at debug: pelwarden reports Redis failures itself.
type slogPrintf struct{ log *slog.Logger }

func (l slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

var setLoggerOnce sync.Once

// SetLogger sends go-redis's internal log lines to log. go-redis keeps one
// logger per process, unguarded, so only the first call takes effect.
func SetLogger(log *slog.Logger) {
	setLoggerOnce.Do(func() { redis.SetLogger(slogPrintf{log: log}) })
}
