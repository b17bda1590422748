// Package chaos runs pelwarden and real worker processes against a real
// redis-server, kills things at random, and checks the books at the end.
package chaos

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bins holds the binaries built once for the package: pelwarden and the
// chaos worker.
var bins struct {
	once      sync.Once
	dir       string
	pelwarden string
	worker    string
	err       error
}

func build(t *testing.T) (pelwarden, worker string) {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "pelwarden-chaos-bin")
		if bins.err != nil {
			return
		}
		bins.pelwarden = filepath.Join(bins.dir, "pelwarden")
		bins.worker = filepath.Join(bins.dir, "chaosworker")
		for out, pkg := range map[string]string{bins.pelwarden: "../../cmd/pelwarden", bins.worker: "../chaosworker"} {
			cmd := exec.Command("go", "build", "-o", out, pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.pelwarden, bins.worker
}

// proc is one child process with its output in a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Children die with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term asks the process to stop and waits, then kills it after 10 s.
func (p *proc) term() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the process's log, for failure messages.
func (p *proc) tail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return p.name + ":\n  " + strings.Join(all, "\n  ")
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
