package liveness

import (
	"context"
	"slices"
	"time"
)

// A look at a deadline reads what can decide it, and no more. The lapse of
// a fresh heartbeat is decided by its key alone: when the worker beat
// again, nothing of the group changed with time, and a GET of the key
// beside Redis's TIME is the whole look. Only a beat that did lapse, or a
// deadline of another kind (an idle crossing, a pod's grace, the
// breaker's hold), needs the group read again.

// Confirmer reads heartbeat keys of a target's connection in one round
// trip: the Observation's ServerTime, ReadAt and Heartbeats, nothing else.
type Confirmer func(ctx context.Context, t Target, keys []string) (Observation, error)

// beatDecides says that a read of cv's heartbeat key decides its lapse:
// the heartbeat source judges it, and it is Alive on a fresh beat.
func beatDecides(spec Spec, cv ConsumerView) bool {
	return spec.Heartbeat && cv.Heartbeat == HeartbeatFresh && cv.Verdict == Alive && !cv.Held
}

// beatKey is the key whose beat judged cv, as heartbeatFor chose it; ok is
// false where that cannot be told again (an owner a pod named).
func (s Spec) beatKey(cv ConsumerView) (key string, ok bool) {
	keys := s.HeartbeatKeys(cv.Name)
	if len(keys) == 0 {
		return "", false
	}
	if !s.byOwner() {
		return keys[0], true
	}
	for i, c := range s.Owner.Candidates(cv.Name) {
		if c == cv.Owner {
			return keys[i], true
		}
	}
	return "", false
}

// lapseAt is when cv's fresh heartbeat, as s read it, turns stale: the
// instant changeIn gives it.
func (s *Snapshot) lapseAt(spec Spec, cv ConsumerView) time.Time {
	return s.At.Add(spec.HeartbeatMaxAge - cv.HeartbeatAge + time.Nanosecond)
}

// beatsDue lists the heartbeat keys whose lapse is due by at, when reading
// them decides every deadline of s due by then; ok is false when the
// group must be read.
func (s *Snapshot) beatsDue(at time.Time) (keys []string, ok bool) {
	if s.Target == nil || (!s.groupChange.IsZero() && !s.groupChange.After(at)) {
		return nil, false
	}
	spec := s.Target.Spec
	for _, cv := range s.Consumers {
		if cv.Pending == 0 || !beatDecides(spec, cv) || s.lapseAt(spec, cv).After(at) {
			continue
		}
		k, ok := spec.beatKey(cv)
		if !ok {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, len(keys) > 0
}

// afterBeats is s's next deadline once obs, a read of the keys beatsDue(at)
// listed, found every one of them fresh again and not degraded: the
// group's deadlines, the lapses not yet due, and the new beats' lapses.
// ok is false when one did not beat again: the group must be read.
func (s *Snapshot) afterBeats(at time.Time, obs Observation) (next time.Time, ok bool) {
	spec := s.Target.Spec
	next = s.groupChange
	for _, cv := range s.Consumers {
		if cv.Pending == 0 || !beatDecides(spec, cv) {
			continue
		}
		lapse := s.lapseAt(spec, cv)
		if lapse.After(at) {
			next = earliest(next, lapse)
			continue
		}
		k, _ := spec.beatKey(cv)
		hb := readHeartbeat(spec, k, obs)
		if hb.State != HeartbeatFresh || hb.Degraded {
			return time.Time{}, false
		}
		next = earliest(next, obs.ReadAt.Add(spec.HeartbeatMaxAge-hb.Age+time.Nanosecond))
	}
	return next, true
}

// lookJob is the looks due on one reader.
type lookJob struct {
	r     *reader
	looks []*entry
}

// lookJobs groups the looks of es by reader.
func lookJobs(es []*entry) []lookJob {
	var jobs []lookJob
	for _, e := range es {
		i := 0
		for i < len(jobs) && jobs[i].r != e.reader {
			i++
		}
		if i == len(jobs) {
			jobs = append(jobs, lookJob{r: e.reader})
		}
		jobs[i].looks = append(jobs[i].looks, e)
	}
	return jobs
}

// confirmable says the looks of es, all due on one reader, may be decided
// by their heartbeat keys alone; confirmBeats reads them.
func (v *View) confirmable(es []*entry) bool {
	_, _, ok := v.beatsToRead(es, v.opts.Now())
	return ok
}

// beatsToRead are the snapshots of es and the heartbeat keys whose read
// decides their looks at at; ok is false when the group must be read.
func (v *View) beatsToRead(es []*entry, at time.Time) (snaps []*Snapshot, keys []string, ok bool) {
	if v.opts.Confirm == nil || len(es) == 0 {
		return nil, nil, false
	}
	snaps = make([]*Snapshot, len(es))
	for i, e := range es {
		e.mu.Lock()
		s, err := e.snap, e.err
		e.mu.Unlock()
		if err != nil || s == nil {
			return nil, nil, false
		}
		due, ok := s.beatsDue(at)
		if !ok {
			return nil, nil, false
		}
		for _, k := range due {
			if !contains(keys, k) {
				keys = append(keys, k)
			}
		}
		snaps[i] = s
	}
	return snaps, keys, true
}

// confirmBeats takes the looks of es, all due on reader r, by reading
// their heartbeat keys alone; it reports false, having changed nothing,
// when that cannot decide them and the group must be read.
func (v *View) confirmBeats(ctx context.Context, es []*entry) bool {
	at := v.opts.Now()
	snaps, keys, ok := v.beatsToRead(es, at)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, v.opts.FetchTimeout)
	defer cancel()
	obs, err := v.opts.Confirm(ctx, *es[0].target, keys)
	if err != nil {
		return false
	}
	next := make([]time.Time, len(es))
	for i, s := range snaps {
		var ok bool
		if next[i], ok = s.afterBeats(at, obs); !ok {
			return false
		}
	}
	for i, e := range es {
		e.mu.Lock()
		if e.snap == snaps[i] { // else a newer read set its look
			e.snap = snaps[i].aliveAgain(keys, at)
			v.scheduleLookAt(e, next[i])
		}
		e.mu.Unlock()
	}
	return true
}

// aliveAgain is s with the consumers whose beat under one of keys a read
// at at found fresh again marked Alive then (AliveAt), as a read of the
// group then would have: the disruption breaker counts who turned Ghost
// together by it, and the group is no longer read between lapses. The
// rest of s, its verdicts and counts, is as it was.
func (s *Snapshot) aliveAgain(keys []string, at time.Time) *Snapshot {
	spec := s.Target.Spec
	out := *s
	out.Consumers = slices.Clone(s.Consumers)
	for i := range out.Consumers {
		cv := &out.Consumers[i]
		if cv.Pending == 0 || !beatDecides(spec, *cv) {
			continue
		}
		if k, ok := spec.beatKey(*cv); ok && contains(keys, k) && at.After(cv.AliveAt) {
			cv.AliveAt = at
		}
	}
	return &out
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
