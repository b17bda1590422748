// Package helmtest runs the helm binary pinned in tools/helm/go.mod, for the
// chart tests and for tests that send the chart's objects to a real API
// server. Each call runs with its own Helm state directories and no
// kubeconfig, so no test reads the developer's Helm or cluster settings.
package helmtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Helm is the pinned helm, run from the repository root.
type Helm struct {
	// Bin is the helm binary's path.
	Bin string
	// Root is the repository root, where go.mod and charts/ live.
	Root string
}

var (
	once   sync.Once
	shared Helm
	errs   error
)

// Build builds helm once per process with `go tool -n`, which puts the
// binary in the build cache and prints its path. A missing toolchain or
// module proxy is an error: skipping would let a broken chart through.
func Build() (Helm, error) {
	once.Do(func() { shared, errs = build() })
	return shared, errs
}

func build() (Helm, error) {
	root, err := repoRoot()
	if err != nil {
		return Helm{}, err
	}
	cmd := exec.Command("go", "tool", "-modfile=tools/helm/go.mod", "-n", "helm")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Helm{}, fmt.Errorf("building helm with go tool -modfile=tools/helm/go.mod: %w\n%s", err, stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		return Helm{}, fmt.Errorf("go tool -n printed %q, which does not exist: %w", bin, err)
	}
	return Helm{Bin: bin, Root: root}, nil
}

// repoRoot walks up from the current module's go.mod (the main module, or
// a nested one such as test/chart) to the directory holding
// tools/helm/go.mod.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module of the pelwarden repository")
	}
	for dir := filepath.Dir(gomod); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "tools", "helm", "go.mod")); err == nil {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("no tools/helm/go.mod above %s", gomod)
		}
	}
}

// Chart is the path of charts/pelwarden.
func (h Helm) Chart() string { return filepath.Join(h.Root, "charts", "pelwarden") }

// Run runs helm with args from the repository root.
func (h Helm) Run(tb testing.TB, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	home := tb.TempDir()
	cmd := exec.Command(h.Bin, args...) //nolint:gosec // G204: the pinned helm, arguments from the tests
	cmd.Dir = h.Root
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// Template renders charts/pelwarden as release in namespace with extra
// flags (--values, --set) and returns the manifest stream.
func (h Helm) Template(tb testing.TB, release, namespace string, flags ...string) (string, error) {
	tb.Helper()
	args := append([]string{"template", release, h.Chart(), "--namespace", namespace}, flags...)
	out, errOut, err := h.Run(tb, args...)
	if err != nil {
		return "", fmt.Errorf("helm template: %w\n%s", err, errOut)
	}
	return out, nil
}
