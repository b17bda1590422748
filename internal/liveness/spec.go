package liveness

import (
	"fmt"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// Spec is how one target judges its consumers. It is a plain value so that
// two requests with the same settings share one target.
type Spec struct {
	// Idle enables the idle source (XINFO CONSUMERS idle time).
	Idle bool
	// Heartbeat enables the heartbeat source.
	Heartbeat bool
	// GhostIdle is how long a consumer may go without a read attempt before
	// the idle source calls it a ghost.
	GhostIdle time.Duration
	// HeartbeatKey is the key pattern, with {consumer} or {owner}.
	HeartbeatKey string
	// HeartbeatMaxAge is the age past which a heartbeat is stale.
	HeartbeatMaxAge time.Duration
	// StartGrace is how long a consumer new to pelwarden, read from but
	// without a heartbeat yet, is a starting worker rather than a ghost.
	StartGrace time.Duration
	// Owner maps consumer names to owners; with the kubernetes source an
	// owner is a pod name.
	Owner OwnerMatch
	// Kubernetes enables the kubernetes source: the pods PodSelector
	// selects in PodNamespace.
	Kubernetes   bool
	PodNamespace string
	PodSelector  string
	// PodGrace is how long after its pod went a consumer is still given
	// before it is a ghost.
	PodGrace time.Duration
}

// PodSet names the pods the kubernetes source watches for a spec.
func (s Spec) PodSet() PodSet {
	return PodSet{Namespace: s.PodNamespace, Selector: s.PodSelector}
}

// PodSet is one namespace and label selector: one pod watch serves every
// target that names the same set.
type PodSet struct {
	Namespace string
	Selector  string
}

func (p PodSet) String() string { return p.Namespace + "/" + p.Selector }

// String is a stable text form used as part of a target's identity.
func (s Spec) String() string {
	var src []string
	if s.Idle {
		src = append(src, string(SourceIdle))
	}
	if s.Heartbeat {
		src = append(src, string(SourceHeartbeat))
	}
	out := fmt.Sprintf("%s|%s|%s|%s|%s", strings.Join(src, ","), s.GhostIdle, s.HeartbeatKey, s.HeartbeatMaxAge, s.Owner)
	if s.Heartbeat {
		out += fmt.Sprintf("|startGrace|%s", s.StartGrace)
	}
	if s.Kubernetes {
		out += fmt.Sprintf("|kubernetes|%s|%s|%s", s.PodNamespace, s.PodSelector, s.PodGrace)
	}
	return out
}

// byOwner says the heartbeat key is per owner rather than per consumer.
func (s Spec) byOwner() bool {
	return strings.Contains(s.HeartbeatKey, "{owner}")
}

// Separators at which the prefix resolver cuts a consumer name.
const prefixSeparators = "-_.:@/"

// OwnerMatch maps a consumer name to the owner (process or pod) behind it.
// It is a plain value: a regex match holds its pattern, whose compiled
// program lives in the bounded cache of ownerRegexp.
type OwnerMatch struct {
	mode string // "exact", "prefix" or "regex"
	expr string
}

// ParseOwnerMatch reads the ownerMatch metadata value: exact, prefix or
// regex:<pattern with a (?P<owner>...) group>. Empty means exact. A
// pattern is compiled once, within MaxRegexBytes, MaxRegexInsts and
// MaxRegexRunes.
func ParseOwnerMatch(s string) (OwnerMatch, error) {
	switch {
	case s == "" || s == "exact":
		return OwnerMatch{mode: "exact"}, nil
	case s == "prefix":
		return OwnerMatch{mode: "prefix"}, nil
	case strings.HasPrefix(s, "regex:"):
		expr := strings.TrimPrefix(s, "regex:")
		if _, err := ownerRegexp(expr); err != nil {
			return OwnerMatch{}, err
		}
		return OwnerMatch{mode: "regex", expr: expr}, nil
	default:
		return OwnerMatch{}, fmt.Errorf("got %q", clip.String(s, maxValueEcho))
	}
}

func (m OwnerMatch) String() string {
	if m.mode == "regex" {
		return "regex:" + m.expr
	}
	if m.mode == "" {
		return "exact"
	}
	return m.mode
}

// Candidates lists the owners a consumer name may belong to, most specific
// first. Exact gives the name itself; prefix gives the name and each of its
// prefixes cut at a separator (review-e-codex-0, review-e-codex, review-e,
// review), so that the longest known owner wins; regex gives the owner group
// of a match, or nothing.
// Prefix matching keeps the MaxCandidates longest.
func (m OwnerMatch) Candidates(consumer string) []string {
	switch m.mode {
	case "prefix":
		out, _ := prefixes(consumer)
		return out
	case "regex":
		// Compiled again only when the cache let it go; it compiled when
		// parsed, so it compiles now.
		re, err := ownerRegexp(m.expr)
		if err != nil {
			return nil
		}
		sub := re.FindStringSubmatch(consumer)
		if sub == nil {
			return nil
		}
		owner := sub[re.SubexpIndex("owner")]
		if owner == "" {
			return nil
		}
		return []string{owner}
	default:
		return []string{consumer}
	}
}

// MaxCandidates bounds the owner candidates of one consumer name, and so
// the heartbeat keys read for it. A pod name (a Deployment's name and two
// hashes, at most 253 bytes) seldom has more than six '-'-separated parts;
// 16 leaves room for long owner names, while a name with thousands of
// separators costs 16 reads, not thousands. The longest (most specific)
// candidates are kept, since the longest known owner wins.
const MaxCandidates = 16

// CandidatesCut reports whether prefix matching gave consumer more owner
// candidates than MaxCandidates, so that its shortest prefixes are not
// looked at.
func (m OwnerMatch) CandidatesCut(consumer string) bool {
	if m.mode != "prefix" {
		return false
	}
	_, cut := prefixes(consumer)
	return cut
}

// prefixes is the name and its prefixes cut at a separator, longest first,
// at most MaxCandidates, and whether more were left out.
func prefixes(consumer string) ([]string, bool) {
	out := []string{consumer}
	for i := len(consumer) - 1; i > 0; i-- {
		if strings.IndexByte(prefixSeparators, consumer[i]) >= 0 && !strings.ContainsRune(prefixSeparators, rune(consumer[i-1])) {
			if len(out) == MaxCandidates {
				return out, true
			}
			out = append(out, consumer[:i])
		}
	}
	return out, false
}

// Resolve returns the owner of a consumer: the first candidate for which
// known is true. For exact and regex matching every candidate is known.
func (m OwnerMatch) Resolve(consumer string, known func(owner string) bool) (string, bool) {
	for _, c := range m.Candidates(consumer) {
		if m.mode != "prefix" || known(c) {
			return c, true
		}
	}
	return "", false
}

// HeartbeatKeys lists the heartbeat keys to read for a consumer, most
// specific first. With {consumer} it is one key; with {owner} one key per
// owner candidate, and the longest one that exists decides.
func (s Spec) HeartbeatKeys(consumer string) []string {
	if !s.Heartbeat {
		return nil
	}
	if !s.byOwner() {
		return []string{strings.ReplaceAll(s.HeartbeatKey, "{consumer}", consumer)}
	}
	cands := s.Owner.Candidates(consumer)
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = strings.ReplaceAll(s.HeartbeatKey, "{owner}", c)
	}
	return keys
}
