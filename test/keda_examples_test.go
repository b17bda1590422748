package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGettingStartedShowsTheKEDAObjectsTheSuiteApplies: the ScaledObject
// and TriggerAuthentication docs/getting-started.md shows are the files
// make test-keda applies, whole, so the documented objects are the tested
// ones.
func TestGettingStartedShowsTheKEDAObjectsTheSuiteApplies(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.md"))
	require.NoError(t, err)
	for _, name := range []string{"scaledobject.yaml", "triggerauthentication.yaml"} {
		file, err := os.ReadFile(filepath.Join("..", "examples", "keda", name))
		require.NoError(t, err)
		block := "```yaml kube\n" + string(file) + "```\n"
		require.Contains(t, string(page), block, "docs/getting-started.md shows examples/keda/%s whole, in a yaml kube block", name)
	}
}
