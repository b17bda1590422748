package liveness

import (
	"fmt"
	"strings"
	"time"
)

// Judge combines the evidence for one consumer into a verdict, by the
// verdict table (rules.go): the first row that applies decides. Every
// verdict carries the reasons of each configured source, then the
// deciding row's own.
//
// The evidence is not equal: a pod seen to go is strong evidence of death;
// where heartbeats are configured they decide wherever a record exists,
// however recently the name was read (a recent read counts there only for
// a starting worker and to tell a shared name after its pod went); without
// them a recent read is life and a long idle time weak evidence of death.
// Build then applies the disruption breaker (breaker.go) over the group.
func Judge(spec Spec, ev Evidence) Judgement {
	if !ev.Listed {
		return judge(spec, ev, Judgement{})
	}
	return judgeListed(spec, ev, make([]Reason, 0, reasonsOf(spec)))
}

// reasonsOf is how many reasons the verdict of a listed consumer carries
// under spec, but for a second note: each source's, and the deciding
// row's note.
func reasonsOf(spec Spec) int {
	n := 2
	if spec.Heartbeat {
		n++
	}
	if spec.Kubernetes {
		n++
	}
	return n
}

// judgeListed is Judge of a listed consumer, its reasons appended to
// reasons (empty, of capacity reasonsOf: build gives every consumer of a
// snapshot its share of one array).
func judgeListed(spec Spec, ev Evidence, reasons []Reason) Judgement {
	j := Judgement{Reasons: reasons}
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
	}
	return judge(spec, ev, j)
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

func always(Spec, Evidence) bool { return true }

// firstRead says a stale-dated value is still on its first max age of
// reads, for a consumer whose name is in use.
func firstRead(spec Spec, ev Evidence) bool {
	return ev.Heartbeat.State == HeartbeatStale && ev.Heartbeat.FirstRead > 0 && ev.Seen < spec.HeartbeatMaxAge
}

func heartbeatIs(s HeartbeatState) func(Spec, Evidence) bool {
	return func(_ Spec, ev Evidence) bool { return ev.Heartbeat.State == s }
}

func podIs(s PodState) func(Spec, Evidence) bool {
	return func(spec Spec, ev Evidence) bool { return spec.Kubernetes && ev.Pod.State == s }
}

func freshDegraded(spec Spec, ev Evidence) bool {
	return spec.Heartbeat && ev.Heartbeat.State == HeartbeatFresh && ev.Heartbeat.Degraded
}

// usedSinceGone says the name was read, or its heartbeat written, after
// its pod went. Seen and the heartbeat's age are as of the read's answer,
// ReadLag ago; GoneFor is as of now. Measured at one moment, the read or
// beat came after the pod went exactly when it is younger than the
// departure.
func usedSinceGone(spec Spec, ev Evidence) bool {
	hb := ev.Heartbeat
	readSince := ev.Seen+ev.ReadLag < ev.Pod.GoneFor
	beatSince := spec.Heartbeat && (hb.State == HeartbeatFresh || hb.State == HeartbeatStale) && hb.Age+ev.ReadLag < ev.Pod.GoneFor
	return readSince || beatSince
}

func sharedName(_ Spec, _ Evidence, j Judgement) Judgement {
	j.SharedName = true
	j.Reasons = append(j.Reasons, Reason{Source: SourceKubernetes, Detail: "the name was used after its pod went: another process shares it", Age: -1})
	return j
}

// judge walks the table: the first row of the consumer's sections that
// applies decides.
func judge(spec Spec, ev Evidence, j Judgement) Judgement {
	for i := range rules {
		r := &rules[i]
		if !r.Section.in(spec, ev) || !r.applies(spec, ev) {
			continue
		}
		j.Verdict, j.Rule, j.rule = r.Verdict, r.Name, uint8(i+1)
		if r.note != nil {
			j = r.note(spec, ev, j)
		}
		return j
	}
	// Each section ends with a row that always applies.
	panic(fmt.Sprintf("liveness: no rule applies to %+v under %s", ev, spec))
}
