package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/proctest"
)

const (
	// readyTimeout bounds how long a start or restart waits for PING.
	readyTimeout = 10 * time.Second

	// portAttempts is how many free ports a first start tries before giving
	// up; another process can take a port between probing and binding it.
	portAttempts = 5

	// restartAttempts is how often a restart retries its fixed port while
	// something else holds it.
	restartAttempts = 20

	logTailLines = 30

	// A cluster node listens on its bus port, port+busPortOffset, which
	// must not pass maxPort.
	busPortOffset   = 10000
	maxPort         = 65535
	busPortAttempts = 50
)

func (s *Server) startOnFreePort() error {
	var err error
	for range portAttempts {
		s.port, err = s.pickPort()
		if err != nil {
			return err
		}
		err = s.launch()
		if !errors.Is(err, proctest.ErrPortTaken) {
			return err
		}
	}
	return fmt.Errorf("no free port after %d attempts: %w", portAttempts, err)
}

func (s *Server) restart() error {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.stopLocked()
	}
	s.mu.Unlock()
	if closed {
		return errors.New("restart of a closed server")
	}
	var err error
	for range restartAttempts {
		err = s.launch()
		if !errors.Is(err, proctest.ErrPortTaken) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// pickPort returns a free port for this server. A cluster node also binds
// its bus port, port+10000, so both must be free and the port below 55535.
func (s *Server) pickPort() (int, error) {
	if s.opts.role != roleClusterNode {
		return proctest.FreePort()
	}
	for range busPortAttempts {
		port, err := proctest.FreePort()
		if err != nil {
			return 0, err
		}
		if port+busPortOffset > maxPort {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+busPortOffset)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("find free bus port: %w", err)
		}
		if !proctest.Reserve(port + busPortOffset) {
			continue
		}
		return port, nil
	}
	return 0, fmt.Errorf("no port with a free bus port (+%d) after %d attempts", busPortOffset, busPortAttempts)
}

func (s *Server) args() []string {
	var args []string
	if s.opts.role == roleSentinel {
		// Sentinel mode takes its config file first and rewrites it, so
		// the file lives in the server's own directory.
		args = append(args, s.sentinelConfPath(), "--sentinel")
	}
	if s.opts.TLS != nil {
		args = append(args, s.opts.TLS.args(s.port)...)
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", s.logPath(),
		// No RDB snapshots, even with AOF: the AOF alone brings data back,
		// and background saves would add forks and noise to chaos tests.
		"--save", "",
		// Lets tests use DEBUG SLEEP and friends from loopback.
		"--enable-debug-command", "local",
	)
	if s.opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	}
	args = append(args, s.roleArgs()...)
	users, _ := userArgs(s.opts.Users) // checked by prepare
	args = append(args, users...)
	return append(args, s.opts.Args...)
}

func (s *Server) logPath() string    { return filepath.Join(s.dir, "redis.log") }
func (s *Server) outputPath() string { return filepath.Join(s.dir, "redis.stdout") }

// launch runs redis-server once and waits until it is ready. It returns
// proctest.ErrPortTaken when the port belongs to someone else.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("start of a closed server")
	}
	logStart := proctest.FileSize(s.logPath())
	out, err := os.Create(s.outputPath())
	if err != nil {
		return fmt.Errorf("create output file: %w", err)
	}
	defer func() { _ = out.Close() }() // the child holds its own copy

	cmd := exec.Command(s.bin, s.args()...) //nolint:gosec // G204: redis-server from PATH or PELWARDEN_REDIS_SERVER, our own args
	cmd.Stdout = out
	cmd.Stderr = out
	p, err := proctest.Run(cmd)
	if err != nil {
		return err
	}
	s.proc = p

	if err := waitReady(s.Addr(), s.tls, p); err != nil {
		s.killLocked()
		tail := s.logTail(logStart)
		if errors.Is(err, proctest.ErrPortTaken) || strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%s: %w", s.Addr(), proctest.ErrPortTaken)
		}
		return fmt.Errorf("redis-server on %s: %w\n--- log tail (%s) ---\n%s", s.Addr(), err, s.dir, tail)
	}
	return nil
}

// waitReady polls until the server answers PING, checking that the process
// that answers is ours and not another server that won the port. It speaks
// RESP directly: a go-redis pool backs off after failed dials, which would
// slow down every start.
func waitReady(addr string, tlsCfg *tls.Config, p *proctest.Child) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pid, err := probe(addr, tlsCfg)
		if err == nil {
			if pid != p.Pid() {
				return fmt.Errorf("answered by process %d, not ours: %w", pid, proctest.ErrPortTaken)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %s: %w", readyTimeout, err)
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before answering PING: %s", p.Cmd.ProcessState)
		case <-tick.C:
		}
	}
}

// probe sends PING and INFO server on one connection, over TLS when tlsCfg
// is set, and returns the answering server's process id. It fails while the
// server is still loading its AOF, since PING answers -LOADING then.
func probe(addr string, tlsCfg *tls.Config) (int, error) {
	var conn net.Conn
	var err error
	dialer := &net.Dialer{Timeout: 250 * time.Millisecond}
	if tlsCfg != nil {
		conn, err = tls.DialWithDialer(dialer, "tcp", addr, tlsCfg)
	} else {
		conn, err = dialer.Dial("tcp", addr)
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "PING\r\nINFO server\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "+PONG\r\n" {
		return 0, fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	header, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(header, "$")))
	if !strings.HasPrefix(header, "$") || err != nil {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(header))
	}
	info := make([]byte, size)
	if _, err := io.ReadFull(r, info); err != nil {
		return 0, err
	}
	return strconv.Atoi(infoField(string(info), "process_id"))
}

func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// logTail returns the last lines this run wrote to redis.log, plus anything
// redis-server printed before its log was open (such as config errors).
func (s *Server) logTail(from int64) string {
	var b strings.Builder
	if out, err := os.ReadFile(s.outputPath()); err == nil && len(out) > 0 {
		b.WriteString(lastLines(string(out)))
	}
	logData, err := os.ReadFile(s.logPath())
	if err == nil && int64(len(logData)) >= from {
		b.WriteString(lastLines(string(logData[from:])))
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

// roleArgs are the directives a cluster node or a sentinel needs. Over TLS,
// the cluster bus and replication links speak TLS too, as plaintext is off.
func (s *Server) roleArgs() []string {
	var args []string
	switch s.opts.role {
	case roleClusterNode:
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
		if t := s.opts.TLS; t != nil {
			// The bus always verifies the connecting node's certificate,
			// so nodes present the client pair, not their server one.
			args = append(args, "--tls-cluster", "yes",
				"--tls-client-cert-file", t.ClientCertFile, "--tls-client-key-file", t.ClientKeyFile)
		}
	case roleSentinel, roleStandalone:
	}
	if s.opts.TLS != nil {
		args = append(args, "--tls-replication", "yes")
	}
	return args
}

// lastLines is the end of a server's output, for failure messages.
func lastLines(text string) string {
	return proctest.LastLines(text, logTailLines) + "\n"
}
