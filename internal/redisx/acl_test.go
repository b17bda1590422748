package redisx

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEShowsTheACLRuleAsCoded: operators copy the rule from the
// README, so it must be the one the end-to-end test proves sufficient.
func TestREADMEShowsTheACLRuleAsCoded(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "ACL SETUSER pelwarden on >CHANGE-ME ~* resetchannels "+ACLCommands+"\n")
}
