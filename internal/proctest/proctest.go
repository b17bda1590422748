// Package proctest builds pelwarden's binaries and runs them as real child
// processes for the chaos suite and the benchmarks, so SIGKILL means what it
// means in production.
package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Build compiles each package (path relative to the caller's directory)
// into a temporary folder and returns the binaries by package, in order.
// They are built as the image builds pelwarden (make image's
// -trimpath -ldflags "-s -w"), so a process measured here is the one
// deployed: the symbol tables an unstripped binary carries also take
// resident pages.
func Build(tb testing.TB, pkgs ...string) []string {
	tb.Helper()
	dir := tb.TempDir()
	out := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		out[i] = filepath.Join(dir, filepath.Base(pkg))
		if b, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out[i], pkg).CombinedOutput(); err != nil {
			tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	return out
}

// BuildTool compiles a tool pinned in its own module file (such as
// tools/grpcurl/go.mod, relative to the repository root) into a temporary
// folder and returns the binary. It needs the module proxy or a warm module
// cache; it never skips.
func BuildTool(tb testing.TB, root, modfile, pkg string) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-modfile="+modfile, "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build -modfile=%s %s: %v\n%s", modfile, pkg, err, b)
	}
	return out
}

// Proc is one child process with its output in a file.
type Proc struct {
	*Child
	Name    string
	logPath string
}

// Start runs bin with args; the process is killed at cleanup, and with the
// test binary whatever kills it.
func Start(tb testing.TB, name, bin string, args ...string) *Proc {
	tb.Helper()
	return StartEnv(tb, name, bin, nil, args...)
}

// StartEnv is Start with variables added to the environment, for programs
// configured by it.
func StartEnv(tb testing.TB, name, bin string, env []string, args ...string) *Proc {
	tb.Helper()
	logPath := filepath.Join(tb.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }() // the child holds its own copy
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	c, err := Run(cmd)
	if err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Child: c, Name: name, logPath: logPath}
	tb.Cleanup(p.Kill)
	return p
}

// Term asks the process to stop and waits, then kills it after 10 s.
func (p *Proc) Term() {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Tail is the end of the process's output, for failure messages.
func (p *Proc) Tail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return p.Name + ":\n  " + strings.ReplaceAll(strings.TrimRight(LastLines(string(b), lines), "\n"), "\n", "\n  ")
}
