// Package clip shortens text that pelwarden echoes back, such as a bad value
// quoted in an error message or a reason in a CLI table, so that a
// megabyte of input does not become a megabyte of output.
package clip

import "unicode/utf8"

// marker ends a clipped string.
const marker = "..."

// String returns s when it has at most n bytes; otherwise as much of its
// start as fits in n bytes together with "...". It never cuts a UTF-8
// sequence in two.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(marker), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}
