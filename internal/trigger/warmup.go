package trigger

import (
	"fmt"
	"hash/maphash"
	"strings"
	"time"
)

// WarmUp says why a group of triggers waits before it acts: what changed
// and when. It is put into words only when shown (DescribeTarget, a log
// line); held as text, it cost every group a few hundred bytes for as
// long as the group was enrolled. It is never written to once made.
type WarmUp struct {
	why              string
	changed, started time.Time
	period           time.Duration
}

func (w *WarmUp) String() string {
	why := fmt.Sprintf("%s at %s", w.why, w.changed.UTC().Format(time.RFC3339Nano))
	if w.changed.Sub(w.started) < w.period {
		why = fmt.Sprintf("pelwarden started at %s; %s", w.started.UTC().Format(time.RFC3339Nano), why)
	}
	return why + fmt.Sprintf(": every trigger of the group polls within triggers.warmUp (%s) before it acts", w.period)
}

// signature tells a change of a group's members or merged settings. It is
// their text under two hashes of independent random seeds rather than
// the text itself, which was a few hundred bytes a group: a change goes
// unseen only if both 64-bit hashes collide at once, and a caller cannot
// aim at seeds it never sees.
type signature [2]uint64

var signatureSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// signature is a group's members and merged settings.
func (grp *group) signature(eff Effective) signature {
	var b strings.Builder
	for _, e := range grp.members {
		fmt.Fprintf(&b, "%s/%x|", e.id.from(), e.id.Hash)
	}
	b.WriteString(eff.Target.Key() + "|" + eff.Hygiene.String() + "|" + eff.Conflict)
	s := b.String()
	return signature{maphash.String(signatureSeeds[0], s), maphash.String(signatureSeeds[1], s)}
}
