package doccheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// page is a markdown page with one fenced example.
func page(info, body string) Page {
	return Page{Path: "docs/page.md", Text: "# Page\n\nIntro.\n\n```" + info + "\n" + body + "```\n"}
}

// The example check is what makes TestDocExamplesLoad mean anything: each
// broken example must be reported at its file and line, naming what is
// wrong.
func TestDocExamplesCheckRejectsBrokenExamples(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		page Page
		want string
	}{
		"a yaml block that does not say what it is": {page("yaml", "a: b\n"), "say what this example is: ```yaml config|kube|values|metadata|text"},
		"a json block that does not say what it is": {page("json", "{}\n"), "say what this example is: ```json request|text"},
		"a kind that does not exist":                {page("yaml confg", "a: b\n"), `"confg" is not a kind of example`},
		"a misspelled config key": {
			page("yaml config", "scaler:\n  freshnes: 2s\n"), "scaler.freshnes: unknown key (docs/page.md:7)",
		},
		"a config value out of range": {page("yaml config", "scaler:\n  breakerPercent: 120\n"), "scaler.breakerPercent: must be a percentage"},
		"a config value of the wrong type": {
			page("yaml config", "hygiene:\n  workers: many\n"), "hygiene.workers",
		},
		"a redis connection without an address": {page("yaml config", "redis:\n  - name: default\n"), "redis[0].addr: is required"},
		"a file example that exists but is not a token": {
			page("yaml config", "admin:\n  tokenFile: /etc/hostname\n"), "admin.tokenFile",
		},
		"a relative file path": {
			page("yaml config", "admin:\n  tokenFile: etc/pelwarden/admin-token\n"), `admin.tokenFile: must name a readable file holding the bearer token: "etc/pelwarden/admin-token"`,
		},
		"an unknown trigger metadata key": {
			page("yaml metadata", "stream: jobs\nconsumerGroup: workers\nbacklogCont: \"5\"\n"), "metadata backlogCont: pelwarden does not read it",
		},
		"a bad trigger metadata value": {
			page("yaml metadata", "stream: jobs\nconsumerGroup: workers\npendingEntriesCount: \"five\"\n"), `metadata "pendingEntriesCount"`,
		},
		"an unquoted trigger metadata value": {
			page("yaml metadata", "stream: jobs\nconsumerGroup: workers\npendingEntriesCount: 5\n"), "KEDA takes string values only",
		},
		"a trigger metadata key only the config may set": {
			page("yaml metadata", "stream: jobs\nconsumerGroup: workers\nreclaim: claim\nlivenessProfile: workers\n"), "hygiene is turned off",
		},
		"a profile the examples' pelwarden does not have": {
			page("yaml metadata", "stream: jobs\nconsumerGroup: workers\nlivenessProfile: nobody\n"), `metadata "livenessProfile"`,
		},
		"a request with an unknown field": {
			page("json request pelwarden.v1.ReclaimRequest", `{"target":{"stream":"jobs","group":"workers"},"consumr":"ghost-7"}`+"\n"),
			`unknown field "consumr"`,
		},
		"a request naming no message that takes it": {
			page("json request", `{"target":{"stream":"jobs"},"nothing":1}`+"\n"), "no request message takes it",
		},
		"a request message that does not exist": {
			page("json request pelwarden.v1.NoSuchRequest", "{}\n"), "pelwarden.v1.NoSuchRequest is not a message of pelwarden.v1",
		},
		"text after a kind that takes none": {page("yaml text extra", "a\n"), "takes nothing after the kind"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := problems([]Page{tc.page})
			require.Len(t, got, 1, "one problem for:\n%s", tc.page.Text)
			require.Contains(t, got[0], "docs/page.md:5: ", "the problem should name the fence's file and line")
			require.Contains(t, got[0], tc.want)
		})
	}
}

// The same checks pass what pelwarden accepts, or the test above would
// pass by refusing everything.
func TestDocExamplesCheckAcceptsGoodExamples(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]Page{
		"a config fragment without redis": page("yaml config", "scaler:\n  freshness: 3s\n"),
		"a config naming files not on this machine": page("yaml config",
			"admin:\n  tokenFile: /etc/pelwarden/admin-token\ngrpc:\n  tls:\n    certFile: /etc/pelwarden/tls/tls.crt\n    keyFile: /etc/pelwarden/tls/tls.key\n"),
		"trigger metadata with KEDA's own key": page("yaml metadata",
			"scalerAddress: pelwarden.pelwarden.svc:9090\nstream: jobs\nconsumerGroup: workers\nbacklogCount: \"5\"\nlivenessProfile: workers\n"),
		"trigger metadata asking for requeue": page("yaml metadata",
			"stream: jobs\nconsumerGroup: workers\nreclaim: requeue\nlivenessProfile: workers\nmaxDeliveries: \"5\"\n"),
		"a named request":     page("json request pelwarden.v1.ReclaimRequest", `{"target":{"stream":"jobs","group":"workers"},"consumer":"ghost-7"}`+"\n"),
		"a request unnamed":   page("json request", `{"target":{"stream":"jobs","group":"workers"},"consumer":"old-worker"}`+"\n"),
		"output":              page("json text", "not json at all\n"),
		"another tool's yaml": page("yaml text", "- {{ .Values }}\n"),
		"a shell block":       page("sh", "make demo\n"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Empty(t, problems([]Page{p}))
		})
	}
}

// The link check is what makes TestDocLinksResolve mean anything: a
// missing file, a missing anchor in another page or in the page itself,
// and a link out of the repository are each reported at file:line.
func TestDocLinksCheckRejectsBrokenLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o750))
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(text), 0o600))
	}
	write("docs/other.md", "# Other page\n\n## How it compares\n\n## How it compares\n\n## `waitReplicas` and *TLS*: [the rules](x.md)\n")
	write("docs/demo.png", "")
	for name, tc := range map[string]struct {
		link string
		want string // "" when the link resolves
	}{
		"a missing file":                           {"[x](missing.md)", "docs/page.md:3: missing.md: docs/missing.md does not exist"},
		"a missing anchor elsewhere":               {"[x](other.md#how-it-compare)", "docs/other.md has no heading with anchor #how-it-compare"},
		"a missing in-page anchor":                 {"[x](#intro)", "docs/page.md has no heading with anchor #intro"},
		"a link out of the repo":                   {"[x](../../etc/passwd)", "points outside the repository"},
		"a reference definition":                   {"[x]: nope.md", "docs/nope.md does not exist"},
		"an HTML image":                            {`<img src="nope.png">`, "docs/nope.png does not exist"},
		"an anchor in the wrong case":              {"[x](other.md#How-it-compares)", "no heading with anchor #How-it-compares"},
		"a heading's anchor":                       {"[x](other.md#how-it-compares)", ""},
		"a repeated heading's anchor":              {"[x](other.md#how-it-compares-1)", ""},
		"a heading with code, emphasis and a link": {"[x](other.md#waitreplicas-and-tls-the-rules)", ""},
		"an in-page anchor":                        {"[x](#page)", ""},
		"an image":                                 {"![demo](demo.png)", ""},
		"a link from the root":                     {"[x](/docs/other.md#other-page)", ""},
		"an external link, not fetched":            {"[x](https://example.com/nope#nope)", ""},
		"a link inside inline code":                {"`[x](nope.md)`", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := Page{Path: "docs/page.md", Text: "# Page\n\n" + tc.link + "\n\n```md\n[x](inside-a-fence.md)\n```\n"}
			broken := CheckLinks(root, []Page{p})
			if tc.want == "" {
				require.Empty(t, broken)
				return
			}
			require.Len(t, broken, 1)
			require.Contains(t, broken[0], "docs/page.md:3: ")
			require.Contains(t, broken[0], tc.want)
		})
	}
	// Prose is wrapped, so a link's text often is: the link is still found,
	// at its target's line.
	wrapped := Page{Path: "docs/page.md", Text: "# Page\n\nSee [the page\nfor this](other.md#nowhere).\n"}
	require.Equal(t, []string{"docs/page.md:4: other.md#nowhere: docs/other.md has no heading with anchor #nowhere"},
		CheckLinks(root, []Page{wrapped}))
}

// GitHub's slugs, as github-slugger computes them.
func TestSlugFollowsGitHub(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"How it compares":                                                 "how-it-compares",
		"Durability: `waitReplicas`":                                      "durability-waitreplicas",
		"KEDA's operator: from `XADD` to one":                             "kedas-operator-from-xadd-to-one",
		"The ScaledObject and TriggerAuthentication KEDA's operator runs": "the-scaledobject-and-triggerauthentication-kedas-operator-runs",
		"PEL hygiene (requeue, claim)":                                    "pel-hygiene-requeue-claim",
		"snake_case and kebab-case":                                       "snake_case-and-kebab-case",
		"[Linked](x.md) heading":                                          "linked-heading",
		"Ünïcode stays":                                                   "ünïcode-stays",
	} {
		require.Equal(t, want, Slug(heading), "slug of %q", heading)
	}
	anchors := Anchors("# A\n## A\n## A\n# A-1\n```\n# not a heading\n```\n<a name=\"custom\"></a>\n")
	require.Equal(t, map[string]bool{"a": true, "a-1": true, "a-2": true, "a-1-1": true, "custom": true}, anchors)
}
