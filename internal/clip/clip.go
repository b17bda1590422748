// Package clip shortens text that pelwarden echoes back, such as a bad value
// quoted in an error message, a label value on /metrics or a reason in a
// CLI table, so that a megabyte of input does not become a megabyte of
// output.
package clip

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// marker ends a clipped string.
const marker = "..."

// String returns s when it has at most n bytes; otherwise as much of its
// start as fits in n bytes together with "...". It never cuts a UTF-8
// sequence in two.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n-len(marker)) + marker
}

// hashLen is the length of the hash suffix Unique adds: 64 bits of
// SHA-256 in hex, so that two cut strings differ unless someone finds a
// 64-bit collision on purpose, which buys them nothing but one series or
// log name for two of their own strings.
const hashLen = 16

// UniqueSuffix is the number of bytes Unique's suffix takes: "~" and the
// hash.
const UniqueSuffix = 1 + hashLen

// Unique returns s when it has at most n bytes; otherwise as much of its
// start as fits in n bytes together with "~" and a hash of the whole of s.
// Unlike String it keeps two long strings with the same start apart, which
// a label value or a target named in the log must: two series or two
// targets are never merged by the cut. It never cuts a UTF-8 sequence in
// two; n below UniqueSuffix still returns the whole suffix.
func Unique(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return prefix(s, n-UniqueSuffix) + "~" + hex.EncodeToString(sum[:hashLen/2])
}

// prefix is the longest start of s of at most n bytes that does not end
// inside a UTF-8 sequence.
func prefix(s string, n int) string {
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Label is s as a label value a caller chose: Unique(s, n) when s is
// plain text, and otherwise s with every control, format (the
// bidirectional controls, zero-width spaces), line or paragraph separator
// and invalid byte written as an escape (\u{202e}, \x{ff}), cut as
// Unique cuts, with the hash of s itself: so that no such byte reaches a
// scrape, a dashboard or a terminal as it is, and two values stay two.
func Label(s string, n int) string {
	if plain(s) {
		return Unique(s, n)
	}
	var b []byte
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			b = fmt.Appendf(b, `\x{%02x}`, s[i])
		case !printable(r):
			b = fmt.Appendf(b, `\u{%x}`, r)
		default:
			b = append(b, s[i:i+size]...)
		}
	}
	if len(b) > n-UniqueSuffix {
		b = []byte(prefix(string(b), n-UniqueSuffix))
	}
	sum := sha256.Sum256([]byte(s))
	return string(b) + "~" + hex.EncodeToString(sum[:hashLen/2])
}

// plain says s is valid UTF-8 with every rune printable.
func plain(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !printable(r) {
			return false
		}
	}
	return true
}

// printable says r shows as itself: not a control, format, line or
// paragraph separator rune.
func printable(r rune) bool {
	return !unicode.IsControl(r) && !unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
