package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestTheCLIPageShowsWhatTheCLIPrints: in docs/cli.md, every line of
// output shown for a command that has golden files is a line of one of
// them, so the page cannot show a format the CLI no longer prints ("..."
// stands for lines left out).
func TestTheCLIPageShowsWhatTheCLIPrints(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	checked := 0
	blocks := strings.Split(string(page), "```console\n")
	for _, block := range blocks[1:] {
		body, _, _ := strings.Cut(block, "```")
		lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		command := strings.Fields(lines[0])
		require.True(t, len(command) > 2 && command[0] == "$" && command[1] == "pelwarden", "a console block starts with $ pelwarden: %q", lines[0])
		goldens, err := filepath.Glob(filepath.Join("testdata", command[2]+"*.golden"))
		require.NoError(t, err)
		if len(goldens) == 0 {
			continue
		}
		var printed []string
		for _, g := range goldens {
			b, err := os.ReadFile(g)
			require.NoError(t, err)
			printed = append(printed, strings.Split(string(b), "\n")...)
		}
		for _, line := range lines[1:] {
			if line != "..." {
				require.Contains(t, printed, line, "docs/cli.md shows a line `pelwarden %s` does not print", command[2])
			}
		}
		checked++
	}
	require.GreaterOrEqual(t, checked, 4, "status, plan, reclaim and findings are checked")
}
