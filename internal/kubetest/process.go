package kubetest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds a start or restart. kube-apiserver takes 3 to 5 s
	// on 2 busy cores; the margin covers a loaded CI machine.
	readyTimeout = 90 * time.Second
	// portAttempts is how many free ports a first start tries: another
	// process can take a port between probing and binding it.
	portAttempts = 5
	logTailLines = 40
)

// errPortTaken reports that a server could not bind its port.
var errPortTaken = errors.New("port already in use")

// process is one run of a server binary; done closes once it has exited.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	// logStart is the log's size when this run began.
	logStart int64
}

// launch starts bin with args, appending its output to logPath.
func launch(bin string, args []string, logPath string) (*process, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer func() { _ = out.Close() }() // the child holds its own copy
	p := &process{log: logPath, logStart: fileSize(logPath), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls probe until it succeeds, the process exits, or
// readyTimeout passes. A process that could not bind its port gives
// errPortTaken.
func (p *process) waitReady(what string, probe func() error) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("%s not ready within %s: %w\n--- log tail (%s) ---\n%s", what, readyTimeout, err, p.log, p.tail())
		}
		select {
		case <-p.done:
			tail := p.tail()
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("%s: %w", what, errPortTaken)
			}
			return fmt.Errorf("%s exited before it was ready (%s)\n--- log tail (%s) ---\n%s", what, p.cmd.ProcessState, p.log, tail)
		case <-tick.C:
		}
	}
}

// tail returns the last lines this run wrote to its log.
func (p *process) tail() string {
	data, err := os.ReadFile(p.log)
	if err != nil || int64(len(data)) < p.logStart {
		return "(no log)"
	}
	lines := strings.SplitAfter(strings.TrimRight(string(data[p.logStart:]), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// freePort asks the kernel for a free loopback port. It is released before
// the server binds it, so callers retry on errPortTaken.
func freePort() (int, error) {
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

// onFreePorts runs start with n fresh free ports until it does not fail
// with errPortTaken.
func onFreePorts(n int, start func(ports []int) error) error {
	var err error
	for range portAttempts {
		ports := make([]int, n)
		for i := range ports {
			if ports[i], err = freePort(); err != nil {
				return err
			}
		}
		if err = start(ports); !errors.Is(err, errPortTaken) {
			return err
		}
	}
	return fmt.Errorf("no free port after %d attempts: %w", portAttempts, err)
}
