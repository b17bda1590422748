package redisx

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecurityPageShowsTheACLRuleAsCoded: operators copy the rule from
// docs/security.md, so it must be the one the end-to-end test proves
// sufficient.
func TestSecurityPageShowsTheACLRuleAsCoded(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/security.md")
	require.NoError(t, err)
	require.Contains(t, string(page), "ACL SETUSER pelwarden on >CHANGE-ME ~* resetchannels "+ACLCommands+"\n")
}
