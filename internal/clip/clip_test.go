package clip_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/clip"
)

func TestStringKeepsShortTextAndMarksWhatItCuts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in   string
		n    int
		want string
	}{
		"shorter than n":               {"jobs", 10, "jobs"},
		"exactly n":                    {"0123456789", 10, "0123456789"},
		"one byte over":                {"0123456789a", 10, "0123456..."},
		"no room but the marker":       {"abcdef", 3, "..."},
		"n below the marker":           {"abcdef", 1, "..."},
		"a rune is never cut in two":   {"ééééé", 8, "éé..."},
		"empty stays empty":            {"", 0, ""},
		"long input is bounded by n":   {strings.Repeat("x", 1<<20), 80, strings.Repeat("x", 77) + "..."},
		"multibyte exactly at the cut": {"abcd€", 7, "abcd€"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := clip.String(tt.in, tt.n)
			require.Equal(t, tt.want, got)
			require.True(t, utf8.ValidString(got), "clipped text stays valid UTF-8")
		})
	}
}

func TestUniqueCutsLongTextAndKeepsTwoCutStringsApart(t *testing.T) {
	t.Parallel()
	require.Equal(t, "jobs", clip.Unique("jobs", 32), "short text is kept")
	exact := strings.Repeat("x", 32)
	require.Equal(t, exact, clip.Unique(exact, 32))

	a, b := strings.Repeat("x", 1024)+"a", strings.Repeat("x", 1024)+"b"
	ca, cb := clip.Unique(a, 64), clip.Unique(b, 64)
	require.Len(t, ca, 64)
	require.Len(t, cb, 64)
	require.NotEqual(t, ca, cb, "two names that differ only past the cut stay apart")
	require.True(t, strings.HasPrefix(ca, strings.Repeat("x", 64-clip.UniqueSuffix)+"~"), "the start is kept: %s", ca)
	require.Equal(t, ca, clip.Unique(a, 64), "the same name is cut the same way every time")

	runes := strings.Repeat("é", 100)
	require.True(t, utf8.ValidString(clip.Unique(runes, 40)), "a rune is never cut in two")
	require.LessOrEqual(t, len(clip.Unique(runes, 40)), 40)
	require.Len(t, clip.Unique(a, 3), clip.UniqueSuffix, "below the suffix only the suffix is left")
}

// FuzzUnique: whatever the text and bound, the result is at most the
// bound (or the suffix), is the text itself when it fits, starts with
// the text's start, and stays valid UTF-8.
func FuzzUnique(f *testing.F) {
	f.Add("jobs", 64)
	f.Add(strings.Repeat("x", 2000), 128)
	f.Add(strings.Repeat("é", 300), 41)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 1 << 16
		got := clip.Unique(s, n)
		if len(s) <= n {
			require.Equal(t, s, got)
			return
		}
		require.LessOrEqual(t, len(got), max(n, clip.UniqueSuffix))
		head := got[:len(got)-clip.UniqueSuffix]
		require.True(t, strings.HasPrefix(s, head))
		if utf8.ValidString(s) {
			require.True(t, utf8.ValidString(got))
		}
		require.Equal(t, got, clip.Unique(s, n), "deterministic")
	})
}

// TestLabelEscapesWhatWouldNotShowAsItself: a stream name with NUL, a
// right-to-left override, a zero-width space, a line separator or an
// invalid byte reaches a label value escaped, with a hash that keeps it
// apart from the text its escapes spell; plain text, accents and CJK
// included, stays as it is.
func TestLabelEscapesWhatWouldNotShowAsItself(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"jobs", "téléchargements", "任务", "a b-c_d.e:f"} {
		require.Equal(t, s, clip.Label(s, 128), "plain text is itself")
	}
	cases := map[string]string{
		"jobs\x00":                `jobs\u{0}`,
		"jobs\u202egpj.exe":       `jobs\u{202e}gpj.exe`,
		"a\u200bb":                `a\u{200b}b`,
		"line\u2028break\nnew":    `line\u{2028}break\u{a}new`,
		"bad\xffbyte":             `bad\x{ff}byte`,
		"\u2066isolate\u2069\x7f": `\u{2066}isolate\u{2069}\u{7f}`,
	}
	for in, escaped := range cases {
		got := clip.Label(in, 128)
		require.True(t, strings.HasPrefix(got, escaped+"~"), "%q became %q", in, got)
		require.True(t, utf8.ValidString(got))
		for _, r := range got {
			require.False(t, unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp), "%q keeps %U", got, r)
		}
	}
	require.NotEqual(t, clip.Label("jobs\x00", 128), clip.Label(`jobs\u{0}`, 128), "an escape is never taken for the text it spells")
}

// FuzzLabel: whatever the text, a label is valid UTF-8 without a
// control, format or separator rune, within the bound, and plain text
// stays Unique's.
func FuzzLabel(f *testing.F) {
	f.Add("jobs", 64)
	f.Add("jobs\x00\u202e", 128)
	f.Add(strings.Repeat("\xff", 300), 40)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 1 << 16
		got := clip.Label(s, n)
		require.True(t, utf8.ValidString(got))
		for _, r := range got {
			require.False(t, unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp), "%q keeps %U", got, r)
		}
		require.LessOrEqual(t, len(got), max(n, clip.UniqueSuffix))
		if utf8.ValidString(s) && got == clip.Unique(s, n) {
			return
		}
		require.True(t, strings.HasSuffix(got[:len(got)-clip.UniqueSuffix+1], "~") || len(got) == clip.UniqueSuffix, "an escaped value ends with the hash of the text")
	})
}
