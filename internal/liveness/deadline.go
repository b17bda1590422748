package liveness

import "time"

// DeadlineMargin is how long after a computed deadline pelwarden looks
// again. A deadline is a duration measured from a read (a heartbeat's age
// on Redis's clock, an idle time Redis counts), added to this process's
// monotonic clock, so the clocks' offsets cancel; what is left is the
// read's own latency and the drift between the clocks over one threshold.
// A look a hair early finds the worker still within its threshold and
// costs a second read; this margin makes that the exception while staying
// far below the hundred milliseconds a recovery may take.
const DeadlineMargin = 20 * time.Millisecond

// changeIn is how long after the read ev comes from the verdict of a
// consumer may change with nothing new written: the earliest threshold
// still ahead of it. ok is false when none is (a verdict that only new
// evidence changes, such as a stale heartbeat or a pod seen to go). It is
// pure and mirrors Judge: every "still within" case of a rule there has
// its crossing here.
func changeIn(spec Spec, ev Evidence) (d time.Duration, ok bool) {
	return changeWithin(spec, ev, true)
}

// changeWithin is changeIn, with the lapse of a fresh heartbeat left out
// when lapse is false: the deadline a read of the group must decide, where
// a read of the heartbeat key decides the lapse (confirm.go).
func changeWithin(spec Spec, ev Evidence, lapse bool) (d time.Duration, ok bool) {
	if !ev.Listed {
		return 0, false
	}
	first := func(c time.Duration) {
		if c > 0 && (!ok || c < d) {
			d, ok = c, true
		}
	}
	if spec.Kubernetes && ev.Pod.State == PodGone && !ev.Pod.NameUnique {
		first(spec.PodGrace - ev.Pod.GoneFor)
	}
	if spec.Heartbeat {
		hb := ev.Heartbeat
		switch hb.State {
		case HeartbeatFresh:
			if !lapse {
				// While the beat is fresh the worker is Alive however
				// its node recovers; the read at the lapse, if the beat
				// does lapse, judges the recovery.
				return d, ok
			}
			first(spec.HeartbeatMaxAge - hb.Age + time.Nanosecond) // stale strictly past the max age
		case HeartbeatMissing:
			if ev.Known < spec.StartGrace && ev.Seen < spec.StartGrace {
				first(min(spec.StartGrace-ev.Known, spec.StartGrace-ev.Seen))
			}
			first(hb.Vanished)
			first(hb.Evicting)
		case HeartbeatStale:
			if firstRead(spec, ev) {
				first(hb.FirstRead)
			}
		}
		first(hb.Recovering)
		first(hb.Refused)
		return d, ok
	}
	if spec.Kubernetes && (ev.Pod.State == PodRunning || ev.Pod.State == PodTerminating) {
		return d, ok // its pod keeps it Alive, however idle
	}
	first(spec.GhostIdle - ev.Seen)
	first(ev.IdleRecovering)
	first(ev.IdleRefused)
	return d, ok
}

// NextChange is when a verdict of snapshot s may change by time alone:
// the earliest deadline of a consumer that holds entries (a consumer that
// holds none changes no count and gives nothing back when it turns), or
// of the breaker's hold. Zero when none is ahead.
func (s *Snapshot) NextChange() time.Time { return s.nextChange }

// soonest keeps the earlier of s's next change and at.
func (s *Snapshot) soonest(at time.Time) {
	s.nextChange = earliest(s.nextChange, at)
}

// earliest is the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// deadlines sets s's next change from the gathered evidence of its
// consumers, judged at now, and the breaker's hold.
func (s *Snapshot) deadlines(spec Spec, all []gathered, now time.Time) {
	for _, g := range all {
		if g.view.Pending == 0 || IsHolder(g.view.Name) {
			continue
		}
		d, ok := changeIn(spec, g.ev)
		if !ok {
			continue
		}
		s.soonest(now.Add(d))
		if !beatDecides(spec, g.view) {
			s.groupChange = earliest(s.groupChange, now.Add(d))
		} else if o, ok := changeWithin(spec, g.ev, false); ok {
			s.groupChange = earliest(s.groupChange, now.Add(o))
		}
	}
	if b := s.BreakerState(); b.Held > 0 && !b.ReleasedAt.IsZero() {
		_, w := spec.window()
		s.soonest(b.ReleasedAt.Add(w))
		s.groupChange = earliest(s.groupChange, b.ReleasedAt.Add(w))
	}
}
