package doccheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func repoPages(t *testing.T) (string, []Page) {
	t.Helper()
	root, err := Root(".")
	require.NoError(t, err)
	pages, err := Pages(root)
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return root, pages
}

// checkExample loads one example the way this module can: config,
// metadata and request examples; kube and values examples are loaded by
// the chart tests (test/chart), which have the chart and the decoders.
func checkExample(e Example) error {
	switch {
	case e.Lang == "yaml" && e.Kind == KindConfig:
		return Config(e.Page, e.Line, e.Body)
	case e.Lang == "yaml" && e.Kind == KindMetadata:
		return Metadata(e.Body)
	case e.Lang == "json" && e.Kind == KindRequest:
		return Request(e.Arg, e.Body)
	}
	return nil
}

// problems lists, one a line, each example of the pages that does not say
// what it is or does not load.
func problems(pages []Page) []string {
	var out []string
	for _, e := range Examples(pages) {
		if p := KindProblem(e.Block); p != "" {
			out = append(out, e.Where()+": "+p)
			continue
		}
		if err := checkExample(e); err != nil {
			out = append(out, e.Where()+": "+e.Lang+" "+e.Kind+": "+strings.ReplaceAll(err.Error(), "\n", "\n\t"))
		}
	}
	return out
}

// Every yaml and json example of README.md, docs/ and the chart README
// says what it is, and each config, trigger metadata and Admin API
// request example loads the way pelwarden would load it.
func TestDocExamplesLoad(t *testing.T) {
	t.Parallel()
	_, pages := repoPages(t)
	if got := problems(pages); len(got) > 0 {
		t.Errorf("examples that do not say what they are or do not load:\n%s", strings.Join(got, "\n"))
	}
}

// Every relative link of README.md, docs/ and the chart README reaches a
// file of the repository, and its #anchor a heading of that page.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root, pages := repoPages(t)
	if broken := CheckLinks(root, pages); len(broken) > 0 {
		t.Errorf("links that do not resolve:\n%s", strings.Join(broken, "\n"))
	}
}
