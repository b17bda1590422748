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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
)

// clusterStateReload is how old a cluster client's slot map may get before
// it is read again. go-redis rereads it on MOVED, but after a master dies
// it would keep dialing the dead node until this interval passes (60s by
// default); a few seconds keeps GetMetrics' Unavailable window short for
// one CLUSTER SLOTS per interval.
const clusterStateReload = 2 * time.Second

// NewClient builds the client of one configured connection in its mode: a
// plain client, a FailoverClient that finds and follows the master through
// the sentinels, or a ClusterClient that follows slots. It reads masters
// only, as the scaler's numbers and hygiene must. Context deadlines are
// honored on every socket operation, so a caller's deadline bounds a call
// even while Redis is unreachable.
func NewClient(c config.Redis) (redis.UniversalClient, error) {
	return newClient(c, false, nil)
}

// newClient builds the connection's client; replicas lets read-only
// commands go to replicas where the configuration allows it. w, when not
// nil, follows its nodes (outage.go).
func newClient(c config.Redis, replicas bool, w *connWatch) (redis.UniversalClient, error) {
	var tc *tls.Config
	if c.TLS.Enabled {
		var err error
		if tc, err = tlsConfig(c.TLS); err != nil {
			return nil, fmt.Errorf("redis connection %q: %w", c.Name, err)
		}
	}
	switch c.Mode {
	case config.RedisSentinel:
		s := c.Sentinel
		return w.follow(redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: s.MasterName, SentinelAddrs: s.Addrs,
			SentinelUsername: s.Username, SentinelPassword: s.Password,
			ReplicaOnly: replicas && s.ReplicaReads,
			Username:    c.Username, Password: c.Password, DB: c.DB,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			PoolSize: c.PoolSize, TLSConfig: tc,
			ReadBufferSize: bufferSize, WriteBufferSize: bufferSize,
			PipelineReadBufferSize: pipelineBufferSize, PipelineWriteBufferSize: pipelineBufferSize,
			ClientName: clientName, ContextTimeoutEnabled: true, DisableIdentity: true,
			OnConnect: w.connectHook(),
		})), nil
	case config.RedisCluster:
		cl := c.Cluster
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:          cl.Addrs,
			ReadOnly:       replicas && cl.ReadOnly,
			RouteByLatency: replicas && cl.RouteByLatency,
			RouteRandomly:  replicas && cl.RouteRandomly,
			Username:       c.Username, Password: c.Password,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			PoolSize: c.PoolSize, TLSConfig: tc,
			ReadBufferSize: bufferSize, WriteBufferSize: bufferSize,
			PipelineReadBufferSize: pipelineBufferSize, PipelineWriteBufferSize: pipelineBufferSize,
			ClusterStateReloadInterval: clusterStateReload,
			ClientName:                 clientName, ContextTimeoutEnabled: true, DisableIdentity: true,
			NewClient: w.newNode(),
		}), nil
	case config.RedisStandalone, "":
	}
	return w.follow(redis.NewClient(&redis.Options{
		Addr:         c.Addr,
		Username:     c.Username,
		Password:     c.Password,
		DB:           c.DB,
		DialTimeout:  c.DialTimeout,
		ReadTimeout:  c.ReadTimeout,
		WriteTimeout: c.WriteTimeout,
		PoolSize:     c.PoolSize,
		TLSConfig:    tc,
		// Every connection keeps its buffers for life: go-redis's defaults
		// (32 KiB each way, 128 KiB for the pipeline pool's) are sized for
		// bulk values, where pelwarden's commands and replies are small.
		ReadBufferSize:          bufferSize,
		WriteBufferSize:         bufferSize,
		PipelineReadBufferSize:  pipelineBufferSize,
		PipelineWriteBufferSize: pipelineBufferSize,
		ClientName:              clientName,
		// CLIENT SETINFO is unknown before Redis 7.2; skip the extra call.
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
		OnConnect:             w.connectHook(),
	})), nil
}

// The connections' buffer sizes. A reply or a pipeline larger than its
// buffer still goes through, in more reads or writes: XINFO CONSUMERS of a
// large group, a lease pipeline of every group on a connection.
const (
	bufferSize         = 8 << 10
	pipelineBufferSize = 32 << 10
)

// clientName is what CLIENT LIST shows for pelwarden's connections.
const clientName = "pelwarden"

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
	conns map[string]conn
	// caps are the servers' stream commands (capability.go).
	caps capsCache
}

type conn struct {
	// idleGhost is redis[].idleBefore72: ghost.
	idleGhost bool
	// primary reads and writes masters only.
	primary redis.UniversalClient
	// replica serves the read-only diagnostics; it is primary unless the
	// connection lets them read replicas (sentinel.replicaReads,
	// cluster.readOnly and the route options).
	replica redis.UniversalClient
	// watch follows primary's nodes.
	watch *connWatch
}

// Open builds a client for every configured connection. It does not dial:
// readiness reports reachability, and a Redis that is down at start must not
// stop pelwarden from serving errors for it.
func Open(cfgs []config.Redis) (*Conns, error) {
	cs := &Conns{conns: make(map[string]conn, len(cfgs))}
	for _, c := range cfgs {
		w := newConnWatch(c)
		primary, err := newClient(c, false, w)
		if err != nil {
			_ = cs.Close()
			return nil, err
		}
		cn := conn{primary: primary, replica: primary, idleGhost: c.IdleBefore72 == config.IdleGhost, watch: w}
		if c.ReplicaReads() {
			// Built from the same config, so no error newClient could
			// return is left.
			cn.replica, _ = newClient(c, true, nil)
		}
		cs.conns[c.Name] = cn
	}
	return cs, nil
}

// Get returns the client of a named connection. It reads and writes
// masters only: the scaler, the liveness view and hygiene use it.
func (cs *Conns) Get(name string) (redis.UniversalClient, bool) {
	c, ok := cs.conns[name]
	return c.primary, ok
}

// Diagnostics returns the client that read-only diagnostics of a named
// connection use: one that may read a lagging replica when the connection
// allows replica reads, else the same client Get returns. Nothing that
// judges liveness, reports metrics or changes data may use it.
func (cs *Conns) Diagnostics(name string) (redis.UniversalClient, bool) {
	c, ok := cs.conns[name]
	return c.replica, ok
}

// Names lists the configured connection names, sorted.
func (cs *Conns) Names() []string {
	names := make([]string, 0, len(cs.conns))
	for n := range cs.conns {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Ping checks every connection and returns the failures, naming each. A
// PING refused as a write (MISCONF refuses it) was answered: the reads
// pelwarden serves from go on.
func (cs *Conns) Ping(ctx context.Context) error {
	var errs []error
	for _, name := range cs.Names() {
		if err := cs.conns[name].primary.Ping(ctx).Err(); err != nil && RefusalOf(err) == liveness.RefusalNone {
			errs = append(errs, fmt.Errorf("redis %q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes every client.
func (cs *Conns) Close() error {
	var errs []error
	for _, c := range cs.conns {
		errs = append(errs, c.primary.Close())
		if c.replica != c.primary {
			errs = append(errs, c.replica.Close())
		}
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

// NodeForKey returns the client of the one server that holds key: the
// master serving its slot for a ClusterClient, the client itself otherwise
// (a FailoverClient dials the current master). Commands that must stay on
// one connection (MONITOR, a blocking read with CLIENT UNBLOCK) need it.
func NodeForKey(ctx context.Context, c redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("redis client %T: not a single-server or cluster client", c)
}
