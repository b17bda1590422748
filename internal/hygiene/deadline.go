package hygiene

import (
	"container/heap"
	"context"
	"log/slog"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// A target's next turn is due at the earliest instant something it may
// act on turns, not at the next scan interval:
//   - a verdict turning by time alone (a heartbeat past its max age, an
//     idle time past ghostIdle, a grace ending) is the view's deadline
//     (liveness.Snapshot.NextChange): the view reads the group at that
//     instant and Observe brings the turn to it when a consumer holding
//     entries turned Ghost or Degraded;
//   - an entry left with a ghost, a degraded or (past hardTimeoutSeconds)
//     a live owner because it is not idle long enough yet turns takable at
//     the instant entryDeadline computes after each turn, from the
//     owner's oldest pending entry.
//
// The turn at such an instant is an ordinary scan on a fresh read: the
// verdict, the breaker, the outage rule and the guarded scripts decide,
// so a deadline brings a look forward and never lets anything act that a
// scan on the interval would not. The scan interval stays the safety net
// and the source of new consumers.

// armEntries brings r's turn to when an entry a ghost holds that r's
// last turn did not see turns stale at the earliest: it was delivered
// after the read that turn judged by. An entry that turn saw already has
// its deadline (entryDeadline), earlier than this one, so a read that
// shows only those changes nothing. l.mu is held; r is queued.
func (l *Loop) armEntries(r *runner) {
	if r.t.Hygiene.DryRun || r.index < 0 {
		return
	}
	at := withMargin(r.since.Add(r.t.Hygiene.EntryStale))
	if now := l.opts.Now(); at.Before(now) {
		at = now
	}
	if at.Before(r.due) {
		r.due, r.atDeadline = at, true
		heap.Fix(&l.queue, r.index)
		l.poke(l.wake)
	}
}

// entryDeadline is when the earliest entry left with the owner of one of
// steps turns takable, plus liveness.DeadlineMargin; zero when none will
// before new evidence. steps are what a turn just executed, and began is
// when that turn began. It costs one round trip, each taking owner's
// oldest pending entry, and none when no step takes anything. failed says
// that read failed: the deadline then leaves those entries out, and the
// turn looks again soon.
func (l *Loop) entryDeadline(ctx context.Context, t Target, steps []reclaim.Step, began time.Time) (at time.Time, failed bool) {
	if t.Hygiene.DryRun {
		return time.Time{}, false // a dry run takes nothing: its entries stay takable and a look would repeat the report
	}
	now := l.opts.Now()
	next := quietDeadline(steps, t.Hygiene, now)
	var owners []string
	var taking []reclaim.Step
	for _, st := range steps {
		if st.Action == reclaim.Requeue || st.Action == reclaim.Claim || st.Action == reclaim.Release {
			owners = append(owners, st.Owner.Name)
			taking = append(taking, st)
		}
	}
	c, ok := l.conns.Get(t.Target.Conn)
	if len(owners) == 0 || !ok {
		return withMargin(next), false
	}
	oldest, err := redisx.OldestPending(ctx, c, t.Target.Stream, t.Target.Group, owners)
	if err != nil {
		l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, t.Target.String(), "hygiene: reading the oldest entries left failed; the target is looked at again soon", "target", t.Target.String(), "err", err)
		return withMargin(next), true
	}
	ran := l.opts.Now().Sub(began)
	for i, st := range taking {
		if d, ok := entryTurns(st, oldest[i], t.Hygiene, ran); ok {
			next = earliest(next, now.Add(d))
		}
	}
	return withMargin(next), false
}

// quietDeadline is the deadline of the owners steps leave alone that hold
// nothing yet but give back what they hold and whose name was read within
// entryStaleSeconds (seed 000: a pod that still reads for a silent
// worker): an entry delivered to one from now on turns stale no earlier
// than entryStaleSeconds from now. It reads nothing.
func quietDeadline(steps []reclaim.Step, h policy.Hygiene, now time.Time) time.Time {
	var next time.Time
	for _, st := range steps {
		o := st.Owner
		if st.Action == reclaim.None && o.Pending == 0 && o.Verdict.GivesBack() && o.Idle < h.EntryStale && h.Mode != policy.ReclaimOff {
			next = earliest(next, now.Add(h.EntryStale))
		}
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func withMargin(at time.Time) time.Time {
	if at.IsZero() {
		return at
	}
	return at.Add(liveness.DeadlineMargin)
}

// entryTurns is how long after oldest, the owner's oldest entry left, was
// read it turns idle enough for st's threshold; ran is how long before
// that read the turn began. An owner left with none whose name was read
// within the threshold may be handed one at once (a pod that still reads
// while its worker is silent, seed 000): a look one threshold on takes
// what it got. An entry past the threshold that was short of it when the
// turn began crossed it while the turn ran, perhaps after the script
// looked at it: it is looked at again at once. One already past it then
// was left by the engine for its own reason (a collision, a claim
// refused), which the interval looks at again.
func entryTurns(st reclaim.Step, oldest *redisx.PendingEntry, h policy.Hygiene, ran time.Duration) (time.Duration, bool) {
	threshold := st.MinIdle
	if !st.Owner.GoneAt.IsZero() {
		// A ghost whose pod went gives up at once what was delivered
		// before; what came after waits for entryStaleSeconds.
		threshold = max(threshold, h.EntryStale)
	}
	switch {
	case oldest == nil && st.Owner.Idle < threshold:
		return threshold, true
	case oldest == nil:
		return 0, false
	case oldest.Idle < threshold:
		return threshold - oldest.Idle, true
	case oldest.Idle-ran < threshold:
		return 0, true
	}
	return 0, false
}
