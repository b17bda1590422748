// Package chart checks the Helm chart in charts/pelwarden: it lints and
// renders the chart with the helm binary pinned in tools/helm/go.mod, decodes
// every rendered object strictly into its typed Kubernetes API, and feeds the
// rendered config.yaml and ScaledObjects to pelwarden's own config loader and
// metadata parser.
package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pelwarden/pelwarden/internal/helmtest"
)

const (
	releaseName = "pw"
	namespace   = "apps"
)

var (
	// helm is the pinned helm, built once by `go tool`.
	helm helmtest.Helm
	// repoRoot is the repository root, where go.mod and charts/ live.
	repoRoot string
	// chartDir is charts/pelwarden.
	chartDir string
	// cleanups run after every test, for files shared between tests.
	cleanups []func()
)

// TestMain builds helm before any test runs. A missing toolchain or module
// proxy fails the package: skipping would let a broken chart through CI.
func TestMain(m *testing.M) {
	var err error
	if helm, err = helmtest.Build(); err != nil {
		fmt.Fprintln(os.Stderr, "chart tests:", err)
		os.Exit(1)
	}
	repoRoot, chartDir = helm.Root, helm.Chart()
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// helmRun runs helm with its state directories in a temporary directory and
// no kubeconfig, so no test reads the developer's Helm or cluster settings.
func helmRun(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return helm.Run(t, args...)
}

// valueArgs turns values files and --set pairs into helm flags.
func valueArgs(files []string, sets []string) []string {
	var args []string
	for _, f := range files {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// renderChart runs `helm template` on dir and returns the manifest stream.
func renderChart(t *testing.T, dir string, files, sets []string) (string, error) {
	t.Helper()
	args := append([]string{"template", releaseName, dir, "--namespace", namespace}, valueArgs(files, sets)...)
	out, errOut, err := helmRun(t, args...)
	if err != nil {
		return "", fmt.Errorf("helm template: %w\n%s", err, errOut)
	}
	return out, nil
}

// renderNotes returns NOTES.txt as Helm prints it after an install. `helm
// template` leaves NOTES out; a client-side dry run renders it without a
// cluster.
func renderNotes(t *testing.T, files, sets []string) (string, error) {
	t.Helper()
	args := append([]string{"install", releaseName, chartDir, "--namespace", namespace,
		"--dry-run=client", "--output", "json"}, valueArgs(files, sets)...)
	out, errOut, err := helmRun(t, args...)
	if err != nil {
		return "", fmt.Errorf("helm install --dry-run=client: %w\n%s", err, errOut)
	}
	var release struct {
		Info struct {
			Notes string `json:"notes"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &release); err != nil {
		return "", fmt.Errorf("helm install --output json: %w", err)
	}
	return release.Info.Notes, nil
}

// allOnValues is the values file with every optional part switched on.
func allOnValues() string {
	return filepath.Join(chartDir, "ci", "all-on-values.yaml")
}
