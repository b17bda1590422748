package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEShowsTheKEDAObjectsTheSuiteApplies: the README's ScaledObject
// and TriggerAuthentication are the files make test-keda applies, whole,
// so the documented objects are the tested ones.
func TestREADMEShowsTheKEDAObjectsTheSuiteApplies(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	for _, name := range []string{"scaledobject.yaml", "triggerauthentication.yaml"} {
		file, err := os.ReadFile(filepath.Join("..", "examples", "keda", name))
		require.NoError(t, err)
		block := "```yaml\n" + string(file) + "```\n"
		require.Contains(t, string(readme), block, "README.md shows examples/keda/%s whole, in a yaml block", name)
	}
}
