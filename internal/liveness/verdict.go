// Package liveness decides whether the process behind a consumer name is
// alive. The deciding is pure (plain values and now); the View in view.go
// keeps one snapshot per target fresh through an injected fetch function and
// is shared by the scaler and the hygiene loop, so both act on one verdict.
package liveness

import (
	"fmt"
	"strings"
	"time"
)

// Verdict is the liveness of one consumer. The zero value is Unknown so that
// a verdict nobody set can never be mistaken for Ghost.
type Verdict int

const (
	// Unknown means a configured source could not answer. It is never acted
	// on destructively and the scaler counts its entries as live.
	Unknown Verdict = iota
	// Alive means some process is using the consumer name.
	Alive
	// Ghost means the process behind the name is gone; its pending entries
	// are stuck until something gives them back.
	Ghost
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "Alive"
	case Ghost:
		return "Ghost"
	default:
		return "Unknown"
	}
}

// Source names where a piece of evidence came from.
type Source string

// The liveness sources a target can be configured with.
const (
	SourceIdle       Source = "idle"
	SourceHeartbeat  Source = "heartbeat"
	SourceKubernetes Source = "kubernetes"
)

// Reason is one piece of evidence behind a verdict.
type Reason struct {
	Source Source
	// Detail says what the source saw, in words an operator can act on.
	Detail string
	// Age is the age the source measured (idle time, heartbeat age), or -1
	// where the source has no age to give.
	Age time.Duration
}

func (r Reason) String() string {
	if r.Age < 0 {
		return fmt.Sprintf("%s: %s", r.Source, r.Detail)
	}
	return fmt.Sprintf("%s: %s (%s)", r.Source, r.Detail, r.Age.Round(time.Millisecond))
}

// HeartbeatState is what the heartbeat source saw for one consumer.
type HeartbeatState int

// Heartbeat states.
const (
	// HeartbeatUnread means the key was not read (yet); it counts as Unknown.
	HeartbeatUnread HeartbeatState = iota
	HeartbeatFresh
	HeartbeatStale
	HeartbeatMissing
	// HeartbeatError means the read failed or the value was not a time.
	HeartbeatError
)

// Heartbeat is the heartbeat evidence for one consumer.
type Heartbeat struct {
	State HeartbeatState
	// Age of the newest heartbeat (Fresh or Stale), measured on Redis's clock.
	Age time.Duration
	// Key that was read, for the reasons.
	Key string
	// Err says why the state is HeartbeatError.
	Err string
}

// Evidence is everything the sources say about one consumer.
type Evidence struct {
	// Seen is the time since the consumer's last read attempt (XINFO
	// CONSUMERS idle). It is reset by any XREADGROUP or XCLAIM under the name,
	// so a small value proves some process uses the name.
	Seen time.Duration
	// Inactive is the time since the last read that delivered entries
	// (Redis 7.2+ inactive), or -1 where Redis does not report it.
	Inactive time.Duration
	// Listed is false when the consumer appears in the XPENDING summary but
	// not in XINFO CONSUMERS of the same round trip: nothing is known of it.
	Listed    bool
	Heartbeat Heartbeat
	Pod       Pod
}

// PodState is what the kubernetes source saw of the pod behind a consumer.
type PodState int

// Pod states.
const (
	// PodUnobserved means the source could not answer (its pod cache not
	// current, RBAC refusing); it counts as Unknown.
	PodUnobserved PodState = iota
	// PodNone means no pod of the selector has the owner's name and none
	// was seen to go: no evidence either way.
	PodNone
	// PodRunning means the pod exists and has not finished. It is weak
	// evidence of life: the process in it may hang.
	PodRunning
	// PodTerminating means the pod is being deleted and may be finishing
	// its work; it counts as alive until it is gone.
	PodTerminating
	// PodGone means the pod was deleted, or finished (evicted, completed),
	// while pelwarden watched: strong evidence that its process is dead.
	PodGone
)

func (p PodState) String() string {
	switch p {
	case PodNone:
		return "none"
	case PodRunning:
		return "running"
	case PodTerminating:
		return "terminating"
	case PodGone:
		return "gone"
	default:
		return "unobserved"
	}
}

// Pod is the kubernetes evidence for one consumer.
type Pod struct {
	State PodState
	// Name is the pod the owner resolved to.
	Name string
	// GoneFor is the time since the pod was seen to go (PodGone).
	GoneFor time.Duration
	// Restarts counts container restarts inside the pod: the pod, and the
	// consumer name, outlive a crashed container.
	Restarts int32
	// Err says why the state is PodUnobserved.
	Err string
}

// Judge combines the evidence for one consumer into a verdict.
//
// The rule, in order:
//  1. A consumer missing from XINFO CONSUMERS is Unknown.
//  2. A pod seen to go is strong evidence of death, once its grace has
//     passed: Ghost, unless the name was read or its heartbeat written after
//     the pod went (another process uses the name: Alive, SharedName).
//  3. A fresh heartbeat, or a read attempt more recent than the read grace,
//     is strong evidence of life: Alive.
//  4. A source that could not answer makes the verdict Unknown.
//  5. A terminating pod is finishing its work: Alive.
//  6. With heartbeats configured, a stale or missing heartbeat is Ghost
//     (the consumer has also not been read from within the grace, by rule
//     3), whether or not its pod exists: a running pod may hang.
//  7. A running pod is Alive: idle time alone does not outweigh it, since
//     the worker may be busy with a long job.
//  8. Otherwise (idle source, or no pod of that name), idle past ghostIdle
//     is Ghost.
//
// The read grace is ghostIdle unless heartbeats are the only timed source,
// then the heartbeat max age: a read is as good a sign of life as a
// heartbeat.
func Judge(spec Spec, ev Evidence) Judgement {
	if !ev.Listed {
		return Judgement{Verdict: Unknown, Reasons: []Reason{{Source: SourceIdle, Detail: "consumer is in the pending summary but not in XINFO CONSUMERS", Age: -1}}}
	}
	j := Judgement{Reasons: make([]Reason, 0, 3)}
	seen := Reason{Source: SourceIdle, Detail: "last read attempt", Age: ev.Seen}
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
	hb := ev.Heartbeat.State
	switch {
	case hb == HeartbeatFresh || ev.Seen < spec.readGrace():
		j.Verdict = Alive
	case spec.Heartbeat && (hb == HeartbeatError || hb == HeartbeatUnread),
		spec.Kubernetes && ev.Pod.State == PodUnobserved:
		j.Verdict = Unknown
	case spec.Kubernetes && ev.Pod.State == PodTerminating:
		j.Verdict = Alive
	case spec.Heartbeat:
		j.Verdict = Ghost
	case spec.Kubernetes && ev.Pod.State == PodRunning:
		j.Verdict = Alive
	default:
		j.Reasons[0].Detail += fmt.Sprintf(", past ghostIdle %s", spec.GhostIdle)
		j.Verdict = Ghost
	}
	return j
}

// Judgement is a verdict with the evidence behind it.
type Judgement struct {
	Verdict Verdict
	Reasons []Reason
	// SharedName says the name was used after its pod went: more than one
	// process uses it.
	SharedName bool
}

// judgeGone is rule 2: the pod went GoneFor ago.
func judgeGone(spec Spec, ev Evidence, j Judgement) Judgement {
	hb := ev.Heartbeat
	readSince := ev.Seen < ev.Pod.GoneFor
	beatSince := spec.Heartbeat && (hb.State == HeartbeatFresh || hb.State == HeartbeatStale) && hb.Age < ev.Pod.GoneFor
	switch {
	case readSince || beatSince:
		j.Verdict, j.SharedName = Alive, true
		j.Reasons = append(j.Reasons, Reason{Source: SourceKubernetes, Detail: "the name was used after its pod went: another process shares it", Age: -1})
	case spec.Heartbeat && (hb.State == HeartbeatError || hb.State == HeartbeatUnread):
		j.Verdict = Unknown
	case ev.Pod.GoneFor < spec.PodGrace:
		j.Verdict = Alive
	default:
		j.Verdict = Ghost
	}
	return j
}

func heartbeatReason(spec Spec, hb Heartbeat) Reason {
	switch hb.State {
	case HeartbeatFresh:
		return Reason{Source: SourceHeartbeat, Detail: "fresh heartbeat at " + hb.Key, Age: hb.Age}
	case HeartbeatStale:
		return Reason{Source: SourceHeartbeat, Detail: fmt.Sprintf("heartbeat at %s older than max age %s", hb.Key, spec.HeartbeatMaxAge), Age: hb.Age}
	case HeartbeatMissing:
		return Reason{Source: SourceHeartbeat, Detail: "no heartbeat at " + hb.Key, Age: -1}
	case HeartbeatError:
		return Reason{Source: SourceHeartbeat, Detail: "heartbeat unreadable: " + hb.Err, Age: -1}
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
