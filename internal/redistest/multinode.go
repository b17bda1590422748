package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// settleTimeout bounds every wait of the multi-node harness: a cluster
	// forming, a failover, a slot moving, sentinels agreeing.
	settleTimeout = 30 * time.Second

	pollInterval = 20 * time.Millisecond

	cliName = "redis-cli"
)

// startNodes starts one Server per options, in parallel, each with a data
// directory under tb.TempDir and stopped when the test ends. before, when
// not nil, runs once a Server's port is unknown yet but its directory
// exists, so a sentinel can write its config file there.
func startNodes(tb testing.TB, opts []Options, before func(i int, s *Server) error) []*Server {
	tb.Helper()
	bin, err := lookBinary()
	if err != nil {
		tb.Fatal(err)
	}
	servers := make([]*Server, len(opts))
	for i, o := range opts {
		s := &Server{opts: o, bin: bin, dir: tb.TempDir()}
		if err := s.prepare(); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		if before != nil {
			if err := before(i, s); err != nil {
				tb.Fatalf("redistest: %v", err)
			}
		}
		tb.Cleanup(s.Close)
		servers[i] = s
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.startOnFreePort() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return servers
}

// adminClient is a plain client to one node, for the harness's own
// commands; it does not follow redirections.
func (s *Server) adminClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr(), TLSConfig: s.TLSConfig(),
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second,
		PoolSize: 1,
	})
}

// do runs fn with a short-lived admin client to s.
func (s *Server) do(ctx context.Context, fn func(c *redis.Client) error) error {
	c := s.adminClient()
	defer func() { _ = c.Close() }()
	return fn(c.WithTimeout(5 * time.Second))
}

// running reports whether the server's process is up.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.Exited() && !s.closed
}

// eventually polls cond until it returns nil, and returns its last error,
// naming what it waited for, once settleTimeout has passed. An attempt
// cut short by the wait's own end says only that time ran out: the error
// reported is then the attempt's before it, the reason the wait went on.
func eventually(ctx context.Context, what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s: not within %s: %w", what, settleTimeout, last)
		case <-tick.C:
		}
	}
}

// lookCLI finds redis-cli next to the redis-server the harness runs, so a
// PELWARDEN_REDIS_SERVER from another build gets that build's client, and
// falls back to PATH.
func lookCLI() (string, error) {
	bin, err := lookBinary()
	if err != nil {
		return "", err
	}
	if cli, err := exec.LookPath(filepath.Join(filepath.Dir(bin), cliName)); err == nil {
		return cli, nil
	}
	cli, err := exec.LookPath(cliName)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found next to %s nor on PATH (on Debian: apt-get install redis-tools): %w", cliName, bin, err)
	}
	return cli, nil
}

// cliTLSArgs are the redis-cli flags that reach a TLS server as the harness
// does; nil for plaintext.
func (o Options) cliTLSArgs() []string {
	if o.TLS == nil {
		return nil
	}
	args := []string{"--tls", "--cacert", o.TLS.CAFile}
	if o.TLS.ClientCertFile != "" {
		args = append(args, "--cert", o.TLS.ClientCertFile, "--key", o.TLS.ClientKeyFile)
	}
	return args
}

// runCLI runs redis-cli with args and returns its output with the error.
func runCLI(ctx context.Context, o Options, args ...string) error {
	cli, err := lookCLI()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, cli, append(o.cliTLSArgs(), args...)...) //nolint:gosec // G204: redis-cli next to our redis-server, our own args
	cmd.Env = append(os.Environ(), "REDISCLI_HISTFILE=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: %s %v: %w\n%s", cli, args, err, lastLines(string(out)))
	}
	return nil
}
