package liveness

import (
	"fmt"
	"time"
)

// Breaker is the disruption breaker's threshold. When, in one judgement,
// at least MinConsumers, and at least Fraction, of a group's consumers
// that were Alive within one threshold of the evidence (heartbeatMaxAge,
// or ghostIdle without heartbeats) turn Ghost on that evidence alone, the
// breaker trips: a fault of the evidence (a heartbeat writer broken
// everywhere, workers cut off from Redis, a jump of Redis's clock) is
// likelier than that many deaths at once. Kubernetes' node lifecycle
// controller stops evicting for the same reason when a zone goes
// NotReady at once.
//
// While it is tripped, every consumer that turned Ghost on that evidence
// at the trip or after is held Unknown: counted as live, nothing of its
// taken. A death corroborated by its pod going is never held. The breaker
// lets go once some consumer of the group shows evidence written after
// the trip (a heartbeat, or with idle alone a read), which says the
// evidence works again; the consumers it held stay Unknown for one more
// threshold, as after an outage, so a worker that was cut off has the
// time to write again, and are judged on their own evidence after that.
type Breaker struct {
	// Fraction is the share of the consumers Alive within the window that
	// must turn Ghost together, in (0, 1].
	Fraction float64
	// MinConsumers is the fewest consumers that must turn together.
	MinConsumers int
}

// DefaultBreaker trips when more than half of a group, and at least three
// consumers, turn Ghost together: the thresholds of kube-controller-manager
// (--unhealthy-zone-threshold 0.55, and more than two nodes not ready).
// Two workers dying together is common enough (one node hosting both) to
// act on; three or more with nothing but silent evidence is not.
var DefaultBreaker = Breaker{Fraction: 0.55, MinConsumers: 3}

// BreakerState is one target's breaker, carried from snapshot to snapshot.
// The zero value is a breaker that has not tripped.
type BreakerState struct {
	// TrippedAt is when it tripped, on pelwarden's clock; zero when it has
	// not, or has let go and its hold is over.
	TrippedAt time.Time
	// TrippedServer is Redis's clock at the trip: evidence written after
	// it lets the breaker go.
	TrippedServer time.Time
	// ReleasedAt is when evidence written after the trip was seen; the
	// consumers held stay Unknown for one more threshold after it.
	ReleasedAt time.Time
	// Turned is how many consumers turned Ghost together at the trip, of
	// Of that were Alive within the window.
	Turned, Of int
	// Source is the evidence that failed them.
	Source Source
	// Held counts the consumers the breaker holds Unknown in this snapshot.
	Held int
}

// Tripped reports whether the breaker holds consumers, or would.
func (b BreakerState) Tripped() bool { return !b.TrippedAt.IsZero() }

// window is the threshold of the evidence that judges without a pod.
func (s Spec) window() (Source, time.Duration) {
	if s.Heartbeat {
		return SourceHeartbeat, s.HeartbeatMaxAge
	}
	return SourceIdle, s.GhostIdle
}

// suspect says the consumer is a Ghost on evidence the breaker doubts: any
// but its pod seen to go.
func suspect(g gathered) bool {
	return g.view.Verdict == Ghost && g.ev.Pod.State != PodGone
}

func lives(v Verdict) bool { return v == Alive || v == Degraded }

// apply runs the breaker over the judged consumers of one refresh: it
// lets go, trips, holds, and stamps AliveAt. It returns the new state.
func (b Breaker) apply(spec Spec, st BreakerState, all []gathered, server, now time.Time) BreakerState {
	src, w := spec.window()
	if st.Tripped() && st.ReleasedAt.IsZero() && writtenSince(spec, all, st.TrippedServer, server) {
		st.ReleasedAt = now
	}
	if !st.ReleasedAt.IsZero() && now.Sub(st.ReleasedAt) >= w {
		st = BreakerState{}
	}
	// A consumer counts once: after a trip, only those Alive since.
	from := now.Add(-w)
	if st.Tripped() && st.TrippedAt.After(from) {
		from = st.TrippedAt
	}
	turned, alive := 0, 0
	for _, g := range all {
		switch {
		case lives(g.view.Verdict):
			alive++
		case suspect(g) && g.view.AliveAt.After(from):
			turned++
		}
	}
	if turned > 0 && turned >= b.MinConsumers && float64(turned) >= b.Fraction*float64(turned+alive) && (!st.Tripped() || !st.ReleasedAt.IsZero()) {
		st = BreakerState{TrippedAt: now, TrippedServer: server, Turned: turned, Of: turned + alive, Source: src}
	}
	st.Held = 0
	for i := range all {
		c := &all[i].view
		if lives(c.Verdict) {
			c.AliveAt = now
			continue
		}
		if st.Tripped() && suspect(all[i]) && !c.AliveAt.Before(st.TrippedAt.Add(-w)) && !c.AliveAt.IsZero() {
			c.Verdict, c.Held = Unknown, true
			c.Reasons = append(c.Reasons, st.reason(w))
			st.Held++
		}
	}
	return st
}

// writtenSince reports whether any consumer shows evidence written after
// the trip, at Redis's time tripped: a heartbeat (fresh or stale) dated
// after it or, judged by idle alone, a read after it.
func writtenSince(spec Spec, all []gathered, tripped, server time.Time) bool {
	for _, g := range all {
		if spec.Heartbeat {
			hb := g.ev.Heartbeat
			if (hb.State == HeartbeatFresh || hb.State == HeartbeatStale) && server.Add(-hb.Age).After(tripped) {
				return true
			}
			continue
		}
		if g.ev.Listed && server.Add(-g.ev.Seen).After(tripped) {
			return true
		}
	}
	return false
}

func (b BreakerState) reason(w time.Duration) Reason {
	d := fmt.Sprintf("disruption breaker: %d of the %d consumers Alive within %s turned Ghost together on %s evidence alone at %s, "+
		"likelier a fault of the evidence than a mass death; held Unknown until a consumer shows evidence written after that",
		b.Turned, b.Of, w, b.Source, b.TrippedAt.UTC().Format(time.RFC3339))
	if !b.ReleasedAt.IsZero() {
		d = fmt.Sprintf("disruption breaker tripped at %s (%d of %d turned Ghost together on %s evidence) let go at %s, when evidence "+
			"written after the trip came; held Unknown until %s so that its worker can write again",
			b.TrippedAt.UTC().Format(time.RFC3339), b.Turned, b.Of, b.Source, b.ReleasedAt.UTC().Format(time.RFC3339),
			b.ReleasedAt.Add(w).UTC().Format(time.RFC3339))
	}
	return Reason{Source: b.Source, Detail: d, Age: -1}
}
