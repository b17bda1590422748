package liveness

import (
	"fmt"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// realPatterns are owner patterns of the kind operators write: each must
// stay well inside the bounds.
var realPatterns = []string{
	`^(?P<owner>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-[0-9]+$`,
	`^(?P<owner>[a-z0-9-]+)-[a-f0-9]{8,10}-[a-z0-9]{5}$`,
	`^(?P<owner>.+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
	`(?i)^(?P<owner>[\pL\pN-]+)@[\pL\pN.-]+$`,
	`^(?P<owner>[a-z-]+)-rig-agent-runtime-\d+$`,
}

func TestRealOwnerPatternsFitTheBounds(t *testing.T) {
	t.Parallel()
	for _, p := range realPatterns {
		m, err := ParseOwnerMatch("regex:" + p)
		require.NoError(t, err, p)
		require.Equal(t, "regex:"+p, m.String())
	}
}

func TestOwnerPatternsPastTheBoundsAreRefusedNamingTheLimit(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		pattern string
		limit   string
	}{
		"too long": {
			pattern: "(?P<owner>" + strings.Repeat("a", MaxRegexBytes) + ")", limit: fmt.Sprint(MaxRegexBytes),
		},
		// Each is a few hundred bytes that Go's parser accepts and that
		// compiles to a hundred thousand instructions or rune ranges.
		"repetitions in sequence": {
			pattern: "(?P<owner>x)" + strings.Repeat("x{1000}", 70), limit: fmt.Sprint(MaxRegexInsts),
		},
		"a class repeated": {
			pattern: `(?P<owner>\pL{1000})`, limit: fmt.Sprint(MaxRegexRunes),
		},
		"many large classes": {
			pattern: "(?P<owner>x)" + strings.Repeat(`(?i)[\pL\pN\pS\pP]`, 20), limit: fmt.Sprint(MaxRegexRunes),
		},
		"just past the instructions": {
			pattern: fmt.Sprintf("(?P<owner>x{%d})", MaxRegexInsts), limit: fmt.Sprint(MaxRegexInsts),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseOwnerMatch("regex:" + tc.pattern)
			require.ErrorContains(t, err, tc.limit)
			require.Less(t, len(err.Error()), 300, "the error does not quote the pattern whole")
		})
	}
}

func TestParseOwnerMatchClipsWhatItEchoes(t *testing.T) {
	t.Parallel()
	for _, in := range []string{strings.Repeat("z", 1<<20), "regex:(" + strings.Repeat("a", MaxRegexBytes-2)} {
		_, err := ParseOwnerMatch(in)
		require.Error(t, err)
		require.Less(t, len(err.Error()), 300)
	}
}

// TestAHugeProgramIsRefusedBeforeItIsBuilt: a pattern within
// MaxRegexBytes that would compile to 140,000 instructions is refused by
// the estimate on its parse tree, without the tens of megabytes compiling
// it takes.
func TestAHugeProgramIsRefusedBeforeItIsBuilt(t *testing.T) {
	pattern := "(?P<owner>x)" + strings.Repeat("x{1000}", 70)
	require.LessOrEqual(t, len(pattern), MaxRegexBytes)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := compileBounded(pattern)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "refused on the tree, not on the built program")
}

func TestAPatternIsCompiledOnce(t *testing.T) {
	value := `regex:^(?P<owner>[a-z0-9-]+)-[a-f0-9]{8,10}-[a-z0-9]{5} once$`
	_, err := ParseOwnerMatch(value)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		m, err := ParseOwnerMatch(value)
		if err != nil || m.Candidates("api-7d9f8c6b5d-x2x9q once")[0] != "api" {
			panic("the pattern no longer parses")
		}
	})
	// A compile allocates hundreds of times; a cached pattern's match
	// allocates its submatch slice.
	require.LessOrEqual(t, allocs, float64(4), "parsing again and matching compile nothing")

	bad := "regex:(?P<owner>x)" + strings.Repeat("x{1000}", 10)
	_, err = ParseOwnerMatch(bad)
	require.Error(t, err)
	allocs = testing.AllocsPerRun(20, func() { _, _ = ParseOwnerMatch(bad) })
	require.LessOrEqual(t, allocs, float64(2), "a refused pattern is remembered too")
}

// TestCompiledPatternsStayWithinTheCacheBytes: patterns near the bounds,
// each of a trigger of its own, keep only the cache's bytes compiled; a
// match whose pattern was evicted compiles it again and still resolves.
func TestCompiledPatternsStayWithinTheCacheBytes(t *testing.T) {
	t.Parallel()
	first, err := ParseOwnerMatch(`regex:^(?P<owner>[a-z]+)-\d+ evicted$`)
	require.NoError(t, err)
	var kept []OwnerMatch
	for i := range 200 {
		// Six \pL classes: about 7,900 rune bounds, just inside the bound.
		m, err := ParseOwnerMatch(fmt.Sprintf(`regex:(?P<owner>\pL\pL\pL\pL\pL\pL)%d`, i))
		require.NoError(t, err)
		kept = append(kept, m)
	}
	require.LessOrEqual(t, ownerRegexps.Bytes(), int64(RegexCacheBytes))
	require.Less(t, ownerRegexps.Len(), 200, "the cache let the oldest go")
	require.Equal(t, []string{"api"}, first.Candidates("api-3 evicted"), "an evicted pattern compiles again on use")
	require.Len(t, kept, 200)
}

// FuzzOwnerMatch: any ownerMatch value is refused with a short error or
// accepted with a program inside the bounds, and its candidates never
// panic.
func FuzzOwnerMatch(f *testing.F) {
	for _, p := range realPatterns {
		f.Add("regex:"+p, "api-7d9f8c6b5d-x2x9q")
	}
	f.Add("prefix", "review-e-codex-0")
	f.Add("regex:(?P<owner>x)"+strings.Repeat("x{1000}", 10), "x")
	f.Add(`regex:(?P<owner>\pL{1000})`, "é")
	f.Add("regex:(?P<owner>(x{1000}){1000})", "x")
	f.Fuzz(func(t *testing.T, value, consumer string) {
		m, err := ParseOwnerMatch(value)
		if err != nil {
			require.Less(t, len(err.Error()), 400)
			return
		}
		if expr, ok := strings.CutPrefix(value, "regex:"); ok {
			require.LessOrEqual(t, len(expr), MaxRegexBytes)
			tree, err := syntax.Parse(expr, syntax.Perl)
			require.NoError(t, err)
			prog, err := syntax.Compile(tree.Simplify())
			require.NoError(t, err)
			require.LessOrEqual(t, len(prog.Inst), MaxRegexInsts)
		}
		_ = m.Candidates(consumer)
	})
}
