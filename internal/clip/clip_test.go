package clip_test

import (
	"strings"
	"testing"
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
