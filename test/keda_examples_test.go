package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGettingStartedShowsTheFirstInstallWhole: docs/getting-started.md
// shows each file of the first install (the chart's examples: the values,
// both TLS recipes, the TriggerAuthentication and ScaledObject that make
// test-keda applies) whole, in a block of its kind, so the documented
// files are the tested ones; the README installs with the same values.
func TestGettingStartedShowsTheFirstInstallWhole(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.md"))
	require.NoError(t, err)
	for name, block := range map[string]string{
		"values.yaml": "yaml values", "cert-manager.yaml": "yaml kube", "tls-openssl.sh": "sh",
		"triggerauthentication.yaml": "yaml kube", "scaledobject.yaml": "yaml kube",
	} {
		file, err := os.ReadFile(filepath.Join(firstInstallDir, name))
		require.NoError(t, err)
		require.Contains(t, string(page), "```"+block+"\n"+string(file)+"```\n", "docs/getting-started.md shows %s whole, in a %s block", name, block)
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "-f charts/pelwarden/examples/values.yaml", "the README installs the first install's values")
}
