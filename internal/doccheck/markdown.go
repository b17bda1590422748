// Package doccheck reads pelwarden's markdown (README.md, docs/**/*.md and
// the chart README) for the tests that load every example and resolve
// every link: a page's fenced blocks with what each says it is, its links,
// and the anchors its headings get on GitHub. It is shared by the main
// module's tests and the chart module's (test/chart), which load different
// kinds of example.
package doccheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Page is one markdown file of the repository.
type Page struct {
	// Path is relative to the repository root, with forward slashes.
	Path string
	Text string
}

// Pages reads every markdown page whose examples and links are checked:
// README.md, docs/**/*.md and charts/pelwarden/README.md. Pages added under
// docs/ are picked up without a change here.
func Pages(root string) ([]Page, error) {
	paths := []string{"README.md", "charts/pelwarden/README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	slices.Sort(paths)
	pages := make([]Page, 0, len(paths))
	for _, p := range paths {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p))) //nolint:gosec // G304: the repository's own pages
		if err != nil {
			return nil, err
		}
		pages = append(pages, Page{Path: p, Text: string(text)})
	}
	return pages, nil
}

// Root finds the repository root above dir: the directory whose go.mod is
// pelwarden's main module.
func Root(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for ; ; dir = filepath.Dir(dir) {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // G304: a go.mod above the tests' directory
		if err == nil && strings.HasPrefix(string(mod), "module github.com/pelwarden/pelwarden\n") {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", errors.New("no go.mod of github.com/pelwarden/pelwarden above the working directory")
		}
	}
}

// Block is one fenced code block.
type Block struct {
	// Line is the line of the opening fence, counted from 1.
	Line int
	// Lang is the info string's first word (yaml, json, sh...), Kind its
	// second (config, kube...), Arg the rest (a request message's name).
	Lang, Kind, Arg string
	// Body is the block's content, the fence's indentation removed.
	Body string
}

// Where names the block as file:line.
func (b Block) Where(page string) string { return fmt.Sprintf("%s:%d", page, b.Line) }

// fence is an open code fence: its marker and indentation.
type fence struct {
	marker string
	indent int
}

// openFence reports whether line opens a fence (``` or ~~~, at most three
// spaces deep at top level, deeper inside a list item) and returns it with
// the info string.
func openFence(line string) (fence, string, bool) {
	trimmed := strings.TrimLeft(line, " ")
	indent := len(line) - len(trimmed)
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(trimmed) && trimmed[n] == c {
			n++
		}
		if n >= 3 {
			info := strings.TrimSpace(trimmed[n:])
			if c == '`' && strings.Contains(info, "`") {
				return fence{}, "", false // an inline code span, not a fence
			}
			return fence{marker: trimmed[:n], indent: indent}, info, true
		}
	}
	return fence{}, "", false
}

// closes reports whether line closes f: the same character, at least as
// many, nothing after it.
func (f fence) closes(line string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, f.marker) && strings.Trim(t, f.marker[:1]) == ""
}

// Blocks returns the fenced code blocks of a page, and the text outside
// them with each fenced line blanked, so line numbers still match.
func Blocks(text string) ([]Block, string) {
	lines := strings.Split(text, "\n")
	prose := make([]string, len(lines))
	var blocks []Block
	for i := 0; i < len(lines); i++ {
		f, info, ok := openFence(lines[i])
		if !ok {
			prose[i] = lines[i]
			continue
		}
		b := Block{Line: i + 1}
		words := strings.Fields(info)
		if len(words) > 0 {
			b.Lang = words[0]
		}
		if len(words) > 1 {
			b.Kind = words[1]
		}
		if len(words) > 2 {
			b.Arg = strings.Join(words[2:], " ")
		}
		var body []string
		for i++; i < len(lines) && !f.closes(lines[i]); i++ {
			body = append(body, dedent(lines[i], f.indent))
		}
		b.Body = strings.Join(body, "\n")
		if len(body) > 0 {
			b.Body += "\n"
		}
		blocks = append(blocks, b)
	}
	return blocks, strings.Join(prose, "\n")
}

// dedent removes up to n leading spaces, as CommonMark does for the lines
// of a fence indented n spaces.
func dedent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}
