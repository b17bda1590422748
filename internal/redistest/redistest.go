// Package redistest runs real redis-server processes for tests, benchmarks
// and demos. There are no mocks: every Server is a redis-server child process
// listening on a free loopback port with its data in a private directory.
//
// A missing redis-server binary is a failure, never a skip, so CI cannot go
// green without having exercised Redis.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/proctest"
)

const (
	// binaryName is looked up on PATH unless ServerEnv names a binary.
	binaryName = "redis-server"

	// ServerEnv names the redis-server binary to launch instead of the one
	// on PATH, so one test run can be pointed at another Redis version
	// (make compat runs the suites once per server this way).
	ServerEnv = "PELWARDEN_REDIS_SERVER"

	// stopTimeout bounds a graceful stop before it falls back to SIGKILL.
	stopTimeout = 10 * time.Second
)

// Options configures a Server. The zero value is an in-memory server without
// persistence.
type Options struct {
	// AOF turns on the append-only file (appendfsync everysec) so data
	// survives Kill, Stop and Restart.
	AOF bool

	// TLS, when not nil, makes the server speak TLS only, on the port Addr
	// reports; Client and the readiness probe connect over TLS.
	TLS *TLS

	// Users adds ACL users, each a rule as the `user` directive takes it,
	// e.g. "pelwarden on >secret ~* -@all +ping". The default user is left
	// as it is, so the harness's own connections keep working.
	Users []string

	// Args are extra redis-server directives appended after the defaults, so
	// they override them, e.g. []string{"--maxmemory", "10mb"}.
	Args []string

	// role is set by StartCluster and StartSentinel: a cluster node needs
	// its bus port free too, a sentinel its own writable config file.
	role nodeRole
}

// nodeRole is what a Server runs as.
type nodeRole int

const (
	roleStandalone nodeRole = iota
	roleClusterNode
	roleSentinel
)

// Server is one redis-server process. Its port and data directory stay the
// same across Kill/Stop and Restart. Methods are safe for concurrent use.
type Server struct {
	opts      Options
	bin       string
	dir       string
	port      int
	removeDir bool        // StartProcess made dir; Close removes it.
	tls       *tls.Config // how the harness connects; nil for plaintext

	mu      sync.Mutex
	proc    *proctest.Child
	resume  *time.Timer // pending SIGCONT from Pause
	closed  bool
	clients []*redis.Client // made by Client, waited for by Restart
}

// Start starts a redis-server on 127.0.0.1 with a free port and a data
// directory under tb.TempDir, waits until it answers PING, and kills it when
// the test ends. It fails the test, with the server's log tail, if the server
// cannot start or redis-server is not installed.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	if len(opts) > 1 {
		tb.Fatalf("redistest.Start: got %d Options, want at most 1", len(opts))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	bin, err := lookBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return startBinary(tb, bin, o)
}

// startBinary is Start with the redis-server binary bin.
func startBinary(tb testing.TB, bin string, o Options) *Server {
	tb.Helper()
	s := &Server{opts: o, bin: bin, dir: tb.TempDir()}
	if err := s.prepare(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	// Registered after TempDir, so the process is gone before its
	// directory is removed.
	tb.Cleanup(s.Close)
	if err := s.startOnFreePort(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// StartProcess is Start for code without a testing.TB, such as a demo or a
// benchmark binary. The caller must Close the server, which also removes its
// data directory.
func StartProcess(opts Options) (*Server, error) {
	bin, err := lookBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: create data dir: %w", err)
	}
	s := &Server{opts: opts, bin: bin, dir: dir, removeDir: true}
	err = s.prepare()
	if err == nil {
		err = s.startOnFreePort()
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return s, nil
}

// prepare checks the options that can be checked before starting and loads
// the harness's own TLS client configuration.
func (s *Server) prepare() error {
	if _, err := userArgs(s.opts.Users); err != nil {
		return err
	}
	if s.opts.TLS == nil {
		return nil
	}
	cfg, err := s.opts.TLS.clientConfig()
	if err != nil {
		return err
	}
	s.tls = cfg
	return nil
}

func lookBinary() (string, error) {
	if path := os.Getenv(ServerEnv); path != "" {
		// LookPath on a path with a slash checks that it is an executable
		// file without searching PATH.
		bin, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("redistest: %s=%q is not an executable redis-server: %w", ServerEnv, path, err)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(binaryName)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH (on Debian: apt-get install redis-server): %w", binaryName, err)
	}
	return bin, nil
}

// Addr returns the server's "127.0.0.1:PORT" address.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Dir returns the server's data directory (AOF files and redis.log).
func (s *Server) Dir() string {
	return s.dir
}

// TLSConfig returns the client TLS configuration the harness connects with,
// or nil for a plaintext server.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Clone()
}

// Client returns a go-redis client for the server, as the default user and
// over TLS when the server speaks it, closed when the test ends. It keeps
// working across Restart because it redials, and Restart returns once it
// answers.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()})
	tb.Cleanup(func() { _ = c.Close() })
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Kill sends SIGKILL and waits for the process to exit, as a crash would.
// Without AOF all data is lost. With AOF, acknowledged writes survive: Redis
// appends them to the file before replying, and the file outlives the
// process (appendfsync only matters when the machine itself crashes).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Stop shuts the server down gracefully with SIGTERM, as SHUTDOWN would, and
// waits for it to exit. It falls back to SIGKILL after 10s.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

// Restart starts the server again on the same port and data directory, so
// AOF data comes back, and waits until it answers PING, to every client
// Client made as well. A server that is still running is stopped
// gracefully first.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.restart(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if err := s.clientsAnswer(clientsBack); err != nil {
		tb.Fatalf("redistest: after the restart: %v", err)
	}
}

// clientsBack bounds the wait for Client's clients after a restart.
const clientsBack = 10 * time.Second

// clientsAnswer waits up to d until every open client Client made reaches
// the server: PING gets a reply, an error reply included. A go-redis
// client that failed to dial as many times as its pool is large answers
// its last dial error, without dialing, until a dial it retries every
// second succeeds: a test's first command after a restart would meet the
// outage's error.
func (s *Server) clientsAnswer(d time.Duration) error {
	s.mu.Lock()
	clients := slices.Clone(s.clients)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, c := range clients {
		for {
			err := c.Ping(ctx).Err()
			var reply redis.Error
			if err == nil || errors.Is(err, redis.ErrClosed) || errors.As(err, &reply) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("a client does not answer within %s: %w", d, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Pause freezes the server with SIGSTOP to simulate a hung Redis: it keeps
// its connections but answers nothing. It resumes by itself after d, or on
// Resume. Pause does not block.
func (s *Server) Pause(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.Exited() {
		return
	}
	s.cancelResumeLocked()
	s.proc.Signal(syscall.SIGSTOP)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		// A later Pause or Resume replaced this timer after it fired.
		if s.resume == t {
			s.resumeLocked()
		}
	})
	s.resume = t
}

// Resume continues a paused server at once.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumeLocked()
}

func (s *Server) resumeLocked() {
	s.cancelResumeLocked()
	if s.proc != nil && !s.proc.Exited() {
		s.proc.Signal(syscall.SIGCONT)
	}
}

// Close kills the server and, for StartProcess servers, removes its data
// directory. Close is idempotent; a closed server cannot be restarted.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.killLocked()
	if s.removeDir {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *Server) killLocked() {
	s.cancelResumeLocked()
	if s.proc == nil {
		return
	}
	// SIGKILL also ends a stopped process, so no SIGCONT is needed.
	s.proc.Signal(syscall.SIGKILL)
	<-s.proc.Done()
}

func (s *Server) stopLocked() {
	s.cancelResumeLocked()
	if s.proc == nil || s.proc.Exited() {
		return
	}
	s.proc.Signal(syscall.SIGTERM)
	// A paused server handles SIGTERM only once it runs again.
	s.proc.Signal(syscall.SIGCONT)
	select {
	case <-s.proc.Done():
	case <-time.After(stopTimeout):
		s.killLocked()
	}
}

func (s *Server) cancelResumeLocked() {
	if s.resume != nil {
		s.resume.Stop()
		s.resume = nil
	}
}
