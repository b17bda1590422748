package findings

import (
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Readers is what pelwarden saw of a group's readers taking entries for
// themselves: its hygiene loop compares the group's oldest pending
// entries from scan to scan.
type Readers struct {
	// Since is when the watch began.
	Since time.Time
	// Claims counts the entries seen to move between consumers, their
	// delivery count risen, that pelwarden did not move.
	Claims int64
	// Last is the latest of them; its At is zero when there was none.
	Last Claim
	// Declared is the target's claimingReaders setting.
	Declared bool
}

// Claim is one entry seen to move from one consumer to another with its
// delivery count risen, not by pelwarden: a reader claimed it.
type Claim struct {
	ID string
	// From held it before; empty for an entry released with XNACK.
	From, To   string
	Deliveries int64
	// At is when the read that saw it was made.
	At time.Time
}

// fromReaders gives the findings of what the hygiene loop saw of the
// group's readers, and of its released entries: readers that claim, and
// entries waiting for one. r is nil where the loop does not look after
// the group.
func fromReaders(s *liveness.Snapshot, r *Readers) []Finding {
	var out []Finding
	if r != nil && !r.Last.At.IsZero() {
		out = append(out, Finding{Kind: ClaimingReaders, IDs: []string{r.Last.ID}, Entries: r.Claims, Detail: claimingDetail(*r)})
	}
	if s.ReleasedPending > 0 {
		out = append(out, Finding{Kind: Released, Entries: s.ReleasedPending, Detail: releasedDetail(s.ReleasedPending, r)})
	}
	return out
}

func claimingDetail(r Readers) string {
	from := "consumer " + r.Last.From
	if r.Last.From == "" {
		from = "no owner (released with XNACK)"
	}
	d := fmt.Sprintf("the group's workers claim entries as they read (XREADGROUP ... CLAIM, or XAUTOCLAIM): %d entries were seen to move "+
		"between consumers, their delivery count risen, without pelwarden; the latest, %s, went from %s to %s (delivered %d times) at %s. "+
		"Such readers take any entry idle past their min-idle, a ghost's too: a ghost's entries are left out of the metric until a reader "+
		"or hygiene gives them back, whichever comes first, and hygiene takes an entry only while the ghost still holds it, so none is "+
		"given back twice", r.Claims, r.Last.ID, from, r.Last.To, r.Last.Deliveries, r.Last.At.UTC().Format(time.RFC3339))
	if !r.Declared {
		d += ". The target does not set claimingReaders: true; with it, reclaim release gives entries back under their own ids, for these readers to take at once"
	}
	return d
}

func releasedDetail(n int64, r *Readers) string {
	d := fmt.Sprintf("%d entries were released to the group (XNACK) and no consumer holds them: they count as work in "+
		"pendingEntriesCount and backlogCount, as KEDA's scaler counts them, and hygiene never touches them. A reader that "+
		"claims (XREADGROUP ... CLAIM, XAUTOCLAIM, XCLAIM) takes them; > never delivers a released entry again", n)
	switch {
	case r == nil:
		return d + "; pelwarden does not watch this group's readers (it is no hygiene target)"
	case !r.Last.At.IsZero():
		return d + fmt.Sprintf("; a reader of this group was last seen to claim at %s", r.Last.At.UTC().Format(time.RFC3339))
	case r.Declared:
		return d + fmt.Sprintf("; claimingReaders says the workers claim, but none was seen to since %s", r.Since.UTC().Format(time.RFC3339))
	}
	return d + fmt.Sprintf("; no reader of this group was seen to claim since %s: if none does, these entries stay pending for good, "+
		"counted as work; a worker that releases entries needs readers that claim", r.Since.UTC().Format(time.RFC3339))
}
