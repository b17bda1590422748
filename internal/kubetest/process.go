package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/proctest"
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

// process is one run of a server binary with its output in a log file.
type process struct {
	*proctest.Child
	log string
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
	logStart := proctest.FileSize(logPath)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	c, err := proctest.Run(cmd)
	if err != nil {
		return nil, err
	}
	return &process{Child: c, log: logPath, logStart: logStart}, nil
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
			p.Kill()
			return fmt.Errorf("%s not ready within %s: %w\n--- log tail (%s) ---\n%s", what, readyTimeout, err, p.log, p.tail())
		}
		select {
		case <-p.Done():
			tail := p.tail()
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("%s: %w", what, proctest.ErrPortTaken)
			}
			return fmt.Errorf("%s exited before it was ready (%s)\n--- log tail (%s) ---\n%s", what, p.Cmd.ProcessState, p.log, tail)
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
	return proctest.LastLines(string(data[p.logStart:]), logTailLines)
}

// onFreePorts runs start with n fresh free ports until it does not fail
// with errPortTaken.
func onFreePorts(n int, start func(ports []int) error) error {
	var err error
	for range portAttempts {
		ports := make([]int, n)
		for i := range ports {
			if ports[i], err = proctest.FreePort(); err != nil {
				return err
			}
		}
		if err = start(ports); !errors.Is(err, proctest.ErrPortTaken) {
			return err
		}
	}
	return fmt.Errorf("no free port after %d attempts: %w", portAttempts, err)
}
