package liveness

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/pelwarden/pelwarden/internal/bytecache"
	"github.com/pelwarden/pelwarden/internal/clip"
)

// Bounds of an ownerMatch regular expression. Trigger metadata comes from
// whoever reaches the gRPC port, and a pattern of a few hundred bytes can
// compile to a program of a hundred thousand instructions (x{1000}
// repeated) or hold a hundred thousand rune ranges ([\pL\pN\pS\pP]
// repeated), each costing milliseconds and megabytes to compile and every
// match after. Real owner patterns, such as
// ^(?P<owner>[a-z0-9-]+)-[a-f0-9]{8,10}-[a-z0-9]{5}$, are under a hundred
// bytes, thirty instructions and a hundred ranges; a few \pL classes are
// about 1,300 ranges each.
const (
	// MaxRegexBytes bounds the pattern after "regex:".
	MaxRegexBytes = 512
	// MaxRegexInsts bounds the instructions of the compiled program
	// (regexp/syntax: parse, simplify, compile); a repetition counts each
	// of its copies.
	MaxRegexInsts = 500
	// MaxRegexRunes bounds the rune range bounds the program's instructions
	// hold, each instruction counted apart.
	MaxRegexRunes = 8192
	// RegexCacheBytes bounds the memory of the compiled patterns kept, by
	// the estimate regexSize makes; RegexCacheEntries bounds their number.
	// Compiled patterns live only here: an OwnerMatch holds its pattern's
	// text, so the memory of compiled patterns is this bound, whatever the
	// number of triggers. At the bounds a pattern is about 100 KB; a real
	// one is a few.
	RegexCacheBytes   = 4 << 20
	RegexCacheEntries = 4096
	// estimateSlack lets the estimate made before compiling, which counts
	// generously, pass patterns that compile within the bounds.
	estimateSlack = 4
)

// compiled is a pattern compiled, or why it cannot be.
type compiled struct {
	re  *regexp.Regexp
	err error
}

// ownerRegexps keeps every pattern compiled once, so that the same pattern
// in many triggers, in CheckTrigger and in every judge costs one compile.
var ownerRegexps = bytecache.New[string, compiled](RegexCacheEntries, RegexCacheBytes)

// ownerRegexp compiles expr within the bounds, from the cache when it was
// compiled before. Its error is kept too: a caller repeating a bad pattern
// costs one parse.
func ownerRegexp(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexBytes {
		// Not kept, nor hashed: the key would be the megabyte.
		return nil, fmt.Errorf("the regular expression is %d bytes; at most %d are accepted", len(expr), MaxRegexBytes)
	}
	if c, ok := ownerRegexps.Get(expr); ok {
		return c.re, c.err
	}
	re, size, err := compileBounded(expr)
	if err != nil {
		size = int64(len(expr) + len(err.Error()) + 64)
	}
	ownerRegexps.Add(expr, compiled{re: re, err: err}, size)
	return re, err
}

// compileBounded compiles expr, refusing a program past MaxRegexInsts or
// MaxRegexRunes before regexp builds it, and returns an estimate of the
// memory the result holds.
func compileBounded(expr string) (*regexp.Regexp, int64, error) {
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, 0, invalidRegexp(err)
	}
	// What repetitions expand to is estimated on the tree first, so that a
	// program of a hundred thousand instructions is never built only to be
	// refused.
	insts, runes := estimate(tree)
	if insts > estimateSlack*MaxRegexInsts || runes > estimateSlack*MaxRegexRunes {
		return nil, 0, tooLarge()
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return nil, 0, invalidRegexp(err)
	}
	runes = 0
	for _, in := range prog.Inst {
		runes += len(in.Rune)
	}
	if len(prog.Inst) > MaxRegexInsts || runes > MaxRegexRunes {
		return nil, 0, tooLarge()
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, 0, invalidRegexp(err)
	}
	if re.SubexpIndex("owner") < 0 {
		return nil, 0, errors.New("the regular expression needs a named group (?P<owner>...)")
	}
	return re, regexSize(len(expr), len(prog.Inst), runes), nil
}

// invalidRegexp says why a pattern does not parse. Go's message quotes
// the pattern, or the part of it that is wrong, which can be all of it:
// it is clipped like any value echoed back.
func invalidRegexp(err error) error {
	return fmt.Errorf("invalid regular expression: %s", clip.String(err.Error(), maxRegexEcho))
}

// maxRegexEcho bounds the part of a parse error that quotes the pattern;
// maxValueEcho bounds a value quoted with %q, which may write a byte as
// four.
const (
	maxRegexEcho = 120
	maxValueEcho = 40
)

func tooLarge() error {
	return fmt.Errorf("the regular expression compiles to more than %d instructions or %d rune ranges (each repetition counts its copies)",
		MaxRegexInsts, MaxRegexRunes)
}

// regexSize estimates the memory a compiled pattern holds: its program
// and the one-pass copy regexp may make, about 50 bytes an instruction
// and 8 a rune bound as measured, and a fixed part.
func regexSize(exprLen, insts, runes int) int64 {
	return int64(1024 + 2*exprLen + 64*insts + 8*runes)
}

// estimate counts, on a parsed tree, about the instructions and rune
// bounds its program will have, each repetition multiplying its body. It
// counts high (a literal string is one instruction per rune, as Compile
// makes it), never builds anything, and is linear in the tree: Go's
// parser already refuses nested repetitions past a thousand copies.
func estimate(re *syntax.Regexp) (insts, runes int) {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune), len(re.Rune)
	case syntax.OpCharClass:
		return 1, len(re.Rune)
	}
	for _, sub := range re.Sub {
		i, r := estimate(sub)
		insts, runes = insts+i, runes+r
	}
	if re.Op == syntax.OpRepeat {
		n := max(re.Min, re.Max, 1)
		insts, runes = n*insts, n*runes
	}
	return insts + 1, runes
}
