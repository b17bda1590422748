package redistest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKnowsReadsTheServersCommandTable(t *testing.T) {
	t.Parallel()
	s := Start(t)
	for command, want := range map[string]bool{
		"XADD":              true,
		"XPENDING":          true,
		"XREADGROUP NOACK":  true,
		"XREADGROUP ROUGE":  false,
		"NOSUCHCOMMAND":     false,
		"NOSUCHCOMMAND ANY": false,
	} {
		require.Equal(t, want, s.Knows(t, command), command)
	}
}

func TestStartWithGivesAServerThatKnowsTheStreamCommandsOnRedis8(t *testing.T) {
	t.Parallel()
	s := StartWith(t, Options{}, XAckDel, ReadClaim, XNack)
	for _, c := range []string{XAckDel, ReadClaim, XNack} {
		require.True(t, s.Knows(t, c), c)
	}
}
