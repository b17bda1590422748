// Package liveness decides whether the process behind a consumer name is
// alive. The deciding is pure (plain values and now); the View in view.go
// keeps one snapshot per target fresh through an injected fetch function and
// is shared by the scaler and the hygiene loop, so both act on one verdict.
package liveness

import (
	"fmt"
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
	// Degraded means a process is alive behind the name but says, in a
	// fresh heartbeat, that it cannot do the work (a quota exhausted, a
	// provider down). It is a verdict of its own, not a flag on Alive, so
	// that no code that trusts Alive (a claim target, the live count) can
	// mistake it for a working consumer: its entries are given back once
	// stale, as a ghost's are, the scaler leaves them out, it never
	// receives claimed entries, and it is never deleted.
	Degraded
)

func (v Verdict) String() string {
	switch v {
	case Alive:
		return "Alive"
	case Ghost:
		return "Ghost"
	case Degraded:
		return "Degraded"
	default:
		return "Unknown"
	}
}

// GivesBack reports whether the consumer's pending entries are to be given
// back once stale (Ghost or Degraded): the scaler leaves them out of the
// work live consumers face, and hygiene takes them.
func (v Verdict) GivesBack() bool {
	return v == Ghost || v == Degraded
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
	// HeartbeatFuture means the value is dated more than FutureTolerance
	// ahead of Redis's clock: a broken clock or writer, not trusted.
	HeartbeatFuture
)

// Record reports whether the state proves a key exists under the pattern:
// a value was read (fresh, stale, from the future, or unparsable) or the
// read failed on the key itself.
func (s HeartbeatState) Record() bool {
	return s == HeartbeatFresh || s == HeartbeatStale || s == HeartbeatFuture || s == HeartbeatError
}

// Heartbeat is the heartbeat evidence for one consumer.
type Heartbeat struct {
	State HeartbeatState
	// Age of the newest heartbeat (Fresh or Stale), measured on Redis's clock.
	Age time.Duration
	// Key that was read, for the reasons.
	Key string
	// Err says why the state is HeartbeatError.
	Err string
	// Degraded and DegradedReasons are what a JSON heartbeat says of its
	// worker's health.
	Degraded        bool
	DegradedReasons []string
	// Recovering is how much longer the key's node must stay readable
	// before a stale or missing heartbeat is evidence: the max age less
	// the time since the node became readable again after an outage, a
	// failover, a restart or pelwarden's start. 0 once a whole max age
	// has passed, or where nodes are not followed.
	Recovering time.Duration
	// Refused is how much longer a stale or missing heartbeat is not
	// evidence because the key's node refuses writes (Refusal), or
	// accepts them again for less than the max age: the max age less the
	// time since it accepts them.
	Refused time.Duration
	Refusal Refusal
	// Evicting is how much longer a missing key is not evidence because
	// its node evicts keys: the max age less the time since it was last
	// seen to evict one.
	Evicting time.Duration
	// Vanished, for a missing key that pelwarden read holding a beat, is
	// how much longer until that beat is a max age old: a key that
	// expired early, was deleted or evicted says no more than its last
	// beat did.
	Vanished time.Duration
	// FirstRead, for a value dated past the max age that pelwarden has
	// read unchanged for less than the max age, is how much longer until
	// it has: the time a value claims is its worker's clock, and only a
	// value that stays unchanged a max age on pelwarden's reads is stale
	// for sure.
	FirstRead time.Duration
	// Skew is how far the time the value claims lies outside the stretch
	// in which pelwarden saw it written (after the read that saw the value
	// before, up to the read that saw it): the worker's clock, as last
	// measured; 0 within it, or where it was not measured.
	Skew time.Duration

	// claim is the time the value claims, on the worker's clock.
	claim time.Time
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
	// IdleFromDeliveries says Seen counts from the last read that
	// delivered entries, not the last attempt (Redis before 7.2).
	IdleFromDeliveries bool
	// IdleJudgesHolders says the operator lets Seen judge a consumer
	// holding entries all the same (redis[].idleBefore72: ghost).
	IdleJudgesHolders bool
	// Pending is the entries the consumer holds.
	Pending int64
	// Listed is false when the consumer appears in the XPENDING summary but
	// not in XINFO CONSUMERS of the same round trip: nothing is known of it.
	Listed    bool
	Heartbeat Heartbeat
	Pod       Pod
	// Known is how long pelwarden has known the consumer (0 on its first
	// read of the group): a new name without a heartbeat yet is a starting
	// worker for the start grace.
	Known time.Duration
	// ReadLag is how long before the judgement Redis answered the read
	// that Seen and the heartbeat's age come from. The moment a pod went
	// is compared with them as of that answer: against the judgement's
	// moment, a read made before the pod went could look made after it.
	ReadLag time.Duration
	// NoGroupHeartbeats says no consumer of the group has a heartbeat
	// record at all (Build decides it over the whole group): the key
	// pattern is probably wrong, so no consumer is judged by it.
	NoGroupHeartbeats bool
	// IdleRecovering is Heartbeat.Recovering for the idle source: how
	// much longer the stream's node must stay readable before an idle
	// time past ghostIdle is evidence.
	IdleRecovering time.Duration
	// IdleRefused is how much longer an idle time past ghostIdle is not
	// evidence because the stream's node refuses XREADGROUP with other
	// writes (IdleRefusal), or accepts them for less than ghostIdle.
	IdleRefused time.Duration
	IdleRefusal Refusal
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
	// NameUnique says no other pod will take the name (a ReplicaSet's
	// pod): a pod gone is dead at once, without the pod grace.
	NameUnique bool
	// Restarts counts container restarts inside the pod: the pod, and the
	// consumer name, outlive a crashed container.
	Restarts int32
	// Err says why the state is PodUnobserved.
	Err string
}

// Judgement is a verdict with the evidence behind it.
type Judgement struct {
	Verdict Verdict
	Reasons []Reason
	// Rule names the row of the verdict table that decided (Rules).
	Rule string
	// rule is that row's index plus one.
	rule uint8
	// SharedName says the name was used after its pod went: more than one
	// process uses it.
	SharedName bool
	// IdleUndecided says idle alone was to judge a consumer holding
	// entries, on a server whose idle counts delivering reads only: it is
	// Unknown.
	IdleUndecided bool
}
