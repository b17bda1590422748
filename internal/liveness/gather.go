package liveness

import (
	"slices"
	"time"
)

// gather collects the evidence of every consumer of the observation, its
// consumerRows, in name order. before is the previous snapshot's
// consumers, also in name order, from which each keeps when it was first
// seen.
func gather(spec Spec, obs Observation, rows []consumerRow, before []ConsumerView, now time.Time, out []gathered) []gathered {
	lag := readLag(obs.ReadAt)
	out = slices.Grow(out, len(rows))
	b := 0
	for _, row := range rows {
		c, ok, name := row.obs, row.listed, row.obs.Name
		cv := ConsumerView{Name: name, Pending: row.pending, Idle: c.Idle, Inactive: c.Inactive, HeartbeatAge: -1, FirstSeen: now}
		if !ok {
			cv.Inactive = -1
		}
		for b < len(before) && before[b].Name < name {
			b++
		}
		var memo beatMemo
		var skew time.Duration
		if b < len(before) && before[b].Name == name {
			cv.FirstSeen, cv.AliveAt = before[b].FirstSeen, before[b].AliveAt
			memo, skew = before[b].beat, before[b].ClockSkew
		}
		hb, owner := heartbeatFor(spec, name, obs)
		if spec.Heartbeat {
			r := obs.Heartbeats[hb.Key]
			cv.beat = memo.timed(spec, &hb, r.Value, obs.ServerTime, now, skew)
			cv.ClockSkew = hb.Skew
			n := r.Health()
			hb.Recovering = recovering(spec.HeartbeatMaxAge, n.ReadableSince, now)
			hb.Refusal, hb.Refused = n.Refused, refusedFor(spec.HeartbeatMaxAge, n.Refused, n.WritableSince, now)
			hb.Evicting = recovering(spec.HeartbeatMaxAge, n.EvictedAt, now)
		}
		pod := podFor(spec, name, obs, now)
		if pod.Name != "" {
			owner = pod.Name
		}
		cv.Owner, cv.Pod, cv.Heartbeat = owner, pod.State, hb.State
		if hb.State == HeartbeatFresh || hb.State == HeartbeatStale {
			cv.HeartbeatAge = hb.Age
		}
		ev := Evidence{Seen: c.Idle, Inactive: cv.Inactive, Listed: ok, Heartbeat: hb, Pod: pod, Known: max(now.Sub(cv.FirstSeen), 0), ReadLag: lag,
			Pending: cv.Pending, IdleFromDeliveries: obs.IdleFromDeliveries, IdleJudgesHolders: obs.IdleJudgesHolders,
			IdleRecovering: recovering(spec.GhostIdle, obs.StreamReadableSince, now)}
		if obs.StreamRefused.BlocksReads() {
			ev.IdleRefusal, ev.IdleRefused = obs.StreamRefused, refusedFor(spec.GhostIdle, obs.StreamRefused, obs.StreamWritableSince, now)
		}
		out = append(out, gathered{view: cv, ev: ev})
	}
	return out
}

// refusedNow is the refusal a node of the read answers now: the stream's,
// else the first, in Refusals' order, of a heartbeat key's.
func refusedNow(obs Observation) Refusal {
	if obs.StreamRefused != RefusalNone && obs.StreamWritableSince.IsZero() {
		return obs.StreamRefused
	}
	out := RefusalNone
	for _, h := range obs.Heartbeats {
		if n := h.Node; n != nil && n.Refused != RefusalNone && n.WritableSince.IsZero() && (out == RefusalNone || n.Refused < out) {
			out = n.Refused
		}
	}
	return out
}

// noHeartbeatRecords is the guard against a wrong heartbeatKey: heartbeats
// are configured, some consumer's key was read and found missing, and no
// consumer of the group has a record. A group whose every key is missing
// is judged Unknown rather than Ghost: pelwarden cannot tell a pattern
// that matches nothing from a group whose every worker went silent, and
// only the second may be acted on.
func noHeartbeatRecords(spec Spec, all []gathered) bool {
	if !spec.Heartbeat {
		return false
	}
	missing := false
	for _, g := range all {
		if g.ev.Heartbeat.State.Record() {
			return false
		}
		missing = missing || g.ev.Heartbeat.State == HeartbeatMissing
	}
	return missing
}

// podFor finds the pod behind a consumer: the most specific owner
// candidate the kubernetes source knows.
func podFor(spec Spec, consumer string, obs Observation, now time.Time) Pod {
	if !spec.Kubernetes {
		return Pod{}
	}
	if obs.Pods == nil {
		return Pod{Err: "the kubernetes source was not read"}
	}
	if obs.Pods.Err != "" {
		return Pod{Err: obs.Pods.Err}
	}
	for _, cand := range spec.Owner.Candidates(consumer) {
		p, ok := obs.Pods.ByName[cand]
		if !ok {
			continue
		}
		out := Pod{State: p.State, Name: cand, Restarts: p.Restarts, NameUnique: p.NameUnique}
		if p.State == PodGone {
			out.GoneFor = max(now.Sub(p.GoneAt), 0)
		}
		return out
	}
	return Pod{State: PodNone}
}

// readLag is the time since Redis answered the read, measured on the
// process's own monotonic clock (an elapsed time here, whatever clock
// Build is given): a fetch that waited for the CPU, or a pod lookup after
// it, must not make a read look more recent than a pod's departure.
func readLag(readAt time.Time) time.Duration {
	if readAt.IsZero() {
		return 0
	}
	return max(time.Since(readAt), 0)
}
