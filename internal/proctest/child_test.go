package proctest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFreePortNeverGivesAPortTwice asks for more ports than the kernel
// takes to offer a closed one again: each comes once.
func TestFreePortNeverGivesAPortTwice(t *testing.T) {
	seen := make(map[int]bool)
	for range 2000 {
		port, err := FreePort()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d given twice", port)
		seen[port] = true
	}
	port, err := FreePort()
	require.NoError(t, err)
	require.False(t, Reserve(port), "a port FreePort gave is reserved")
}
