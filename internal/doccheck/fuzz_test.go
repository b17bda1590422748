package doccheck

import (
	"strings"
	"testing"
)

// Whatever a page holds, the scanner neither panics nor loses its place:
// blocks and links are on lines of the page, and the prose keeps every
// line so that line numbers stay true.
func FuzzMarkdownScanner(f *testing.F) {
	for _, seed := range []string{
		"# A\n\n[x](y.md#z)\n",
		"```yaml config\na: b\n```\n",
		"  ```\n  unclosed",
		"~~~~json request pelwarden.v1.PlanRequest\n{}\n~~~\n~~~~\n",
		"[a\nb](c) `[d](e)` ``[f](g)`` ` <a href=\"h\" name=\"i\">\n[j]: k\n",
		"## `x` *y* [z](w)\n## `x` *y* [z](w)\n# \n#\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		lines := strings.Count(text, "\n") + 1
		blocks, prose := Blocks(text)
		if got := strings.Count(prose, "\n") + 1; got != lines {
			t.Fatalf("prose has %d lines, the page %d", got, lines)
		}
		for _, b := range blocks {
			if b.Line < 1 || b.Line > lines {
				t.Fatalf("block at line %d of %d", b.Line, lines)
			}
		}
		for _, l := range Links(text) {
			if l.Line < 1 || l.Line > lines {
				t.Fatalf("link %q at line %d of %d", l.Target, l.Line, lines)
			}
		}
		_ = Anchors(text)
		if slug := Slug(text); strings.ContainsAny(slug, " \t\n") {
			t.Fatalf("slug %q keeps a space GitHub would have replaced or dropped", slug)
		}
	})
}
