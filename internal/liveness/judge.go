package liveness

import (
	"fmt"
	"strings"
	"time"
)

// Judge combines the evidence for one consumer into a verdict.
//
// The rule, in order:
//  1. A consumer missing from XINFO CONSUMERS is Unknown.
//  2. A pod seen to go is strong evidence of death, once its grace has
//     passed (at once for a ReplicaSet's pod, whose name never returns): Ghost, unless the name was read or its heartbeat written after
//     the pod went (another process uses the name: Alive, SharedName; or
//     Degraded if that heartbeat says so).
//
// With heartbeats configured, the heartbeat decides wherever a record
// exists, however recently the name was read:
//  3. No consumer of the group has any heartbeat record: the key pattern is
//     probably wrong, so every consumer is Unknown.
//  4. A heartbeat dated more than FutureTolerance ahead of Redis's clock (a
//     broken clock or writer), a read error, an unparsable value or a key
//     not read yet is Unknown.
//  5. A fresh heartbeat is Alive, or Degraded when it says degraded.
//  6. A kubernetes source that could not answer is Unknown; a terminating
//     pod is finishing its work: Alive.
//  7. A missing heartbeat of a consumer known for less than the start
//     grace, whose name was read within it, is a starting worker: Alive.
//  8. A stale heartbeat, or a missing one after the start grace, is Ghost,
//     whether or not the name is still read (seed 000: a pod alive enough
//     to XREADGROUP whose worker went silent) and whether or not its pod
//     runs. A missing key is Ghost because workers write heartbeats with an
//     expiry: a dead worker's key disappears. But while the key's node has
//     been readable for less than the max age (it was unreachable, failed
//     over or restarted, or pelwarden had not read it yet), the worker may
//     not have been able to write it: Unknown, naming the outage.
//
// Without heartbeats:
//  9. A read attempt within ghostIdle is Alive (before Redis 7.2: a read
//     that delivered entries; one that found nothing is not counted).
//  10. A kubernetes source that could not answer is Unknown; a terminating
//     or running pod is Alive (idle time alone does not outweigh a pod: the
//     worker may be busy with a long job).
//  11. Otherwise (idle source, or no pod of that name), idle past ghostIdle
//     is Ghost, unless the stream's node has been readable for less than
//     ghostIdle (as in rule 8): Unknown; and except, before Redis 7.2, for
//     a consumer holding entries: there idle counts from the last read that
//     delivered, so a worker polling an empty stream while it works on what
//     it holds ages like a dead one, and idle cannot tell them apart:
//     Unknown (unless the operator says its workers never read while
//     holding entries).
//
// Build then applies the disruption breaker (breaker.go) over the group.
// A recent read thus counts where heartbeats are configured only for a
// starting worker (rule 7) and to detect a shared name after its pod went
// (rule 2). Listing idle next to heartbeat adds its reason, not a verdict.
func Judge(spec Spec, ev Evidence) Judgement {
	if !ev.Listed {
		return Judgement{Verdict: Unknown, Reasons: []Reason{{Source: SourceIdle, Detail: "consumer is in the pending summary but not in XINFO CONSUMERS", Age: -1}}}
	}
	j := Judgement{Reasons: make([]Reason, 0, 4)}
	seen := Reason{Source: SourceIdle, Detail: "last read attempt", Age: ev.Seen}
	if ev.IdleFromDeliveries {
		seen.Detail = "last read that delivered entries (before Redis 7.2 a read that finds nothing is not counted)"
	}
	if ev.Inactive >= 0 {
		seen.Detail = fmt.Sprintf("last read attempt; last successful read %s ago", ev.Inactive.Round(time.Millisecond))
	}
	j.Reasons = append(j.Reasons, seen)
	if spec.Heartbeat {
		j.Reasons = append(j.Reasons, heartbeatReason(spec, ev.Heartbeat))
	}
	if spec.Kubernetes {
		j.Reasons = append(j.Reasons, podReason(spec, ev.Pod))
		if ev.Pod.State == PodGone {
			return judgeGone(spec, ev, j)
		}
	}
	if spec.Heartbeat {
		return judgeHeartbeat(spec, ev, j)
	}
	switch {
	case ev.Seen < spec.GhostIdle:
		j.Verdict = Alive
	case spec.Kubernetes && ev.Pod.State == PodUnobserved:
		j.Verdict = Unknown
	case spec.Kubernetes && (ev.Pod.State == PodTerminating || ev.Pod.State == PodRunning):
		j.Verdict = Alive
	case ev.IdleRecovering > 0:
		j.Verdict = Unknown
		j.Reasons = append(j.Reasons, outageReason(SourceIdle, "ghostIdle", spec.GhostIdle, ev.IdleRecovering))
	case ev.IdleFromDeliveries && ev.Pending > 0 && !ev.IdleJudgesHolders:
		j.Verdict, j.IdleUndecided = Unknown, true
		j.Reasons = append(j.Reasons, Reason{Source: SourceIdle, Age: -1, Detail: fmt.Sprintf(
			"idle past ghostIdle %s, but this server counts idle from the last read that delivered entries, so a worker "+
				"polling an empty stream while it holds %d looks the same: not judged by idle alone (configure heartbeats, or "+
				"redis[].idleBefore72: ghost where workers never read while holding entries)", spec.GhostIdle, ev.Pending)})
	default:
		j.Reasons[0].Detail += fmt.Sprintf(", past ghostIdle %s", spec.GhostIdle)
		j.Verdict = Ghost
	}
	return j
}

// judgeHeartbeat is rules 3 to 8.
func judgeHeartbeat(spec Spec, ev Evidence, j Judgement) Judgement {
	hb := ev.Heartbeat
	switch {
	case ev.NoGroupHeartbeats:
		j.Verdict = Unknown
		j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: -1, Detail: fmt.Sprintf(
			"no consumer of the group has a heartbeat record under heartbeatKey %s: the pattern is probably wrong, so no consumer is judged by it", spec.HeartbeatKey)})
	case hb.State == HeartbeatFuture, hb.State == HeartbeatError, hb.State == HeartbeatUnread:
		j.Verdict = Unknown
	case hb.State == HeartbeatFresh && hb.Degraded:
		j.Verdict = Degraded
	case hb.State == HeartbeatFresh:
		j.Verdict = Alive
	case spec.Kubernetes && ev.Pod.State == PodUnobserved:
		j.Verdict = Unknown
	case spec.Kubernetes && ev.Pod.State == PodTerminating:
		j.Verdict = Alive
	case hb.State == HeartbeatMissing && ev.Known < spec.StartGrace && ev.Seen < spec.StartGrace:
		j.Verdict = Alive
		j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: ev.Known, Detail: fmt.Sprintf(
			"a starting worker: no heartbeat yet, read within the start grace %s, known for", spec.StartGrace)})
	case hb.Recovering > 0 && (hb.State == HeartbeatStale || hb.State == HeartbeatMissing):
		j.Verdict = Unknown
		j.Reasons = append(j.Reasons, outageReason(SourceHeartbeat, "heartbeatMaxAge", spec.HeartbeatMaxAge, hb.Recovering))
	case hb.State == HeartbeatMissing:
		j.Verdict = Ghost
		j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: -1, Detail: fmt.Sprintf(
			"no heartbeat past the start grace %s: its worker stopped beating or never did, whether or not the name is read", spec.StartGrace)})
	default:
		j.Verdict = Ghost
	}
	return j
}

// judgeGone is rule 2: the pod went GoneFor ago.
func judgeGone(spec Spec, ev Evidence, j Judgement) Judgement {
	hb := ev.Heartbeat
	// Seen and hb.Age are as of the read's answer, ReadLag ago; GoneFor is
	// as of now. Measured at one moment, the read or beat came after the
	// pod went exactly when it is younger than the departure.
	readSince := ev.Seen+ev.ReadLag < ev.Pod.GoneFor
	beatSince := spec.Heartbeat && (hb.State == HeartbeatFresh || hb.State == HeartbeatStale) && hb.Age+ev.ReadLag < ev.Pod.GoneFor
	switch {
	case readSince || beatSince:
		j.Verdict, j.SharedName = Alive, true
		if spec.Heartbeat && hb.State == HeartbeatFresh && hb.Degraded {
			j.Verdict = Degraded
		}
		j.Reasons = append(j.Reasons, Reason{Source: SourceKubernetes, Detail: "the name was used after its pod went: another process shares it", Age: -1})
	case spec.Heartbeat && (hb.State == HeartbeatError || hb.State == HeartbeatUnread || hb.State == HeartbeatFuture):
		j.Verdict = Unknown
	case !ev.Pod.NameUnique && ev.Pod.GoneFor < spec.PodGrace:
		j.Verdict = Alive
	default:
		j.Verdict = Ghost
	}
	return j
}

func heartbeatReason(spec Spec, hb Heartbeat) Reason {
	switch hb.State {
	case HeartbeatFresh:
		if hb.Degraded {
			why := "no reason given"
			if len(hb.DegradedReasons) > 0 {
				why = strings.Join(hb.DegradedReasons, ", ")
			}
			return Reason{Source: SourceHeartbeat, Detail: fmt.Sprintf("fresh heartbeat at %s says degraded (%s)", hb.Key, why), Age: hb.Age}
		}
		return Reason{Source: SourceHeartbeat, Detail: "fresh heartbeat at " + hb.Key, Age: hb.Age}
	case HeartbeatStale:
		return Reason{Source: SourceHeartbeat, Detail: fmt.Sprintf("heartbeat at %s older than max age %s", hb.Key, spec.HeartbeatMaxAge), Age: hb.Age}
	case HeartbeatMissing:
		return Reason{Source: SourceHeartbeat, Detail: "no heartbeat at " + hb.Key, Age: -1}
	case HeartbeatError:
		if hb.Key == "" {
			return Reason{Source: SourceHeartbeat, Detail: "heartbeat unreadable: " + hb.Err, Age: -1}
		}
		return Reason{Source: SourceHeartbeat, Detail: fmt.Sprintf("heartbeat at %s unreadable: %s", hb.Key, hb.Err), Age: -1}
	case HeartbeatFuture:
		// How far ahead is not said: that would give the value away.
		return Reason{Source: SourceHeartbeat, Age: -1, Detail: fmt.Sprintf("heartbeat at %s is not a plausible heartbeat time: "+
			"it is dated more than the %s tolerance ahead of Redis's clock (a broken clock or writer), not trusted", hb.Key, FutureTolerance)}
	default:
		return Reason{Source: SourceHeartbeat, Detail: "heartbeat not read yet", Age: -1}
	}
}

func podReason(spec Spec, p Pod) Reason {
	where := fmt.Sprintf("pod %s/%s", spec.PodNamespace, p.Name)
	switch p.State {
	case PodNone:
		return Reason{Source: SourceKubernetes, Detail: fmt.Sprintf("no pod matching %q is the owner", spec.PodSelector), Age: -1}
	case PodRunning:
		d := where + " exists"
		if p.Restarts > 0 {
			d += fmt.Sprintf(" (%d container restarts)", p.Restarts)
		}
		return Reason{Source: SourceKubernetes, Detail: d, Age: -1}
	case PodTerminating:
		return Reason{Source: SourceKubernetes, Detail: where + " is terminating", Age: -1}
	case PodGone:
		if p.NameUnique {
			return Reason{Source: SourceKubernetes, Detail: where + " went (no grace: its ReplicaSet never reuses a pod name)", Age: p.GoneFor}
		}
		return Reason{Source: SourceKubernetes, Detail: fmt.Sprintf("%s went (grace %s)", where, spec.PodGrace), Age: p.GoneFor}
	default:
		return Reason{Source: SourceKubernetes, Detail: "pods unobserved: " + p.Err, Age: -1}
	}
}

// ReasonsString joins reasons for a log line.
func ReasonsString(rs []Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}
