package hygiene

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/findings"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// sampleSize is how many of a group's oldest pending entries each scan
// compares with the previous scan's: the entries a reader that claims
// takes first, being the longest idle, are the oldest.
const sampleSize = 100

// readerWatch follows one group's readers from scan to scan: an entry
// that moved from one consumer to another, its delivery count risen, that
// pelwarden's engine did not move, was claimed by a worker (XREADGROUP ...
// CLAIM, XAUTOCLAIM). It costs one XPENDING of sampleSize rows a scan.
type readerWatch struct {
	at   time.Time
	prev map[string]redisx.PendingEntry
	seen findings.Readers
}

// readerWatches holds the watches of the loop's targets.
type readerWatches struct {
	mu sync.Mutex
	by map[liveness.GroupRef]*readerWatch
}

// watchReaders samples t's group, read at at, and records the claims the
// sample shows since the previous one. A failed read is left for the next
// scan: the watch only reports.
func (l *Loop) watchReaders(ctx context.Context, c redis.UniversalClient, t Target, at time.Time) {
	g := t.Target.GroupRef
	rows, err := redisx.PendingPage(ctx, c, g.Stream, g.Group, "", 0, "", sampleSize)
	if err != nil {
		l.opts.Log.Debug("could not sample the group's oldest pending entries", "target", t.Target.String(), "err", err)
		return
	}
	l.readers.mu.Lock()
	defer l.readers.mu.Unlock()
	if l.readers.by == nil {
		l.readers.by = make(map[liveness.GroupRef]*readerWatch)
	}
	w := l.readers.by[g]
	if w == nil {
		w = &readerWatch{seen: findings.Readers{Since: at}}
		l.readers.by[g] = w
	}
	w.seen.Declared = t.Hygiene.ClaimingReaders
	ours := l.opts.Engine.ClaimedTo(g, w.at)
	next := make(map[string]redisx.PendingEntry, len(rows))
	for _, r := range rows {
		next[r.ID] = r
		before, ok := w.prev[r.ID]
		if !ok || before.Consumer == r.Consumer || r.Deliveries <= before.Deliveries || ours[r.Consumer] || liveness.IsHolder(r.Consumer) {
			continue
		}
		w.seen.Claims++
		w.seen.Last = findings.Claim{ID: r.ID, From: before.Consumer, To: r.Consumer, Deliveries: r.Deliveries, At: at}
	}
	w.prev, w.at = next, at
}

// Readers is what the loop saw of the readers of a group it looks after.
func (l *Loop) Readers(g liveness.GroupRef) (findings.Readers, bool) {
	l.readers.mu.Lock()
	defer l.readers.mu.Unlock()
	w, ok := l.readers.by[g]
	if !ok {
		return findings.Readers{}, false
	}
	return w.seen, true
}

func (l *Loop) forgetReaders(g liveness.GroupRef) {
	l.readers.mu.Lock()
	defer l.readers.mu.Unlock()
	delete(l.readers.by, g)
}
