package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
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

// FreePort asks the kernel for a free loopback port that this process has
// not been given before. It is released before the server binds it, so
// callers retry on ErrPortTaken. The kernel hands a closed port out again
// soon (within a few hundred picks), and a port a test killed a server on
// is still known to others: a sentinel that waits for the old master, a
// client that dials it again. Given to a second server, it would bring
// that server into the first one's setup.
func FreePort() (int, error) {
	for range freePortAttempts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		if Reserve(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("find free port: the kernel offered only ports given out before, %d times", freePortAttempts)
}

// freePortAttempts bounds FreePort's asks for a port not given out before.
const freePortAttempts = 100

// reserved holds every port FreePort or Reserve gave out in this process.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// Reserve records port as given out, for one more port a server binds
// beside the one FreePort gave it (a cluster node's bus port); false if it
// was given out before.
func Reserve(port int) bool {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.ports[port] {
		return false
	}
	reserved.ports[port] = true
	return true
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
