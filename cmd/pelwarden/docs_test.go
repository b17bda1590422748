package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheDocsNameOnlyCommandsTheCLIHas: every `pelwarden <command>` of
// README.md, docs/ and the chart README is a command of the CLI, so a
// page cannot send the operator to one that does not exist.
func TestTheDocsNameOnlyCommandsTheCLIHas(t *testing.T) {
	t.Parallel()
	root := newRootCommand(func(string) (string, bool) { return "", false }, io.Discard, io.Discard, nil)
	has := map[string]bool{"help": true}
	for _, c := range root.Commands() {
		has[c.Name()] = true
	}
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join("..", "..", "README.md"), filepath.Join("..", "..", "charts", "pelwarden", "README.md"))
	mention := regexp.MustCompile("`pelwarden ([a-z][a-z-]*)")
	for _, p := range pages {
		text, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range mention.FindAllStringSubmatch(string(text), -1) {
			require.True(t, has[m[1]], "%s names `pelwarden %s`, which is no command of the CLI", p, m[1])
		}
	}
}
