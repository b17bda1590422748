package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// ErrPortTaken reports that a server could not bind its port: another
// process took it between FreePort and the bind, so the caller retries.
var ErrPortTaken = errors.New("port already in use")

// Child is one run of a server binary that a test harness starts (Redis,
// etcd, kube-apiserver). It dies with the test binary on Linux.
type Child struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// Run starts cmd, as prepared by the caller (arguments, output,
// environment), and reaps it when it exits.
func Run(cmd *exec.Cmd) (*Child, error) {
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &Child{Cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Done closes once the process has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the process has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Pid is the process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Signal sends sig and returns at once.
func (c *Child) Signal(sig syscall.Signal) { _ = c.Cmd.Process.Signal(sig) }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (c *Child) Kill() {
	c.Signal(syscall.SIGKILL)
	<-c.done
}

// FreePort asks the kernel for a free loopback port. It is released before
// the server binds it, so callers retry on ErrPortTaken.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	return port, nil
}

// FileSize is the size of the file at path, 0 if it cannot be read: where
// a restarted server's log starts.
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LastLines returns the last n lines of text, for failure messages.
func LastLines(text string, n int) string {
	lines := strings.SplitAfter(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
