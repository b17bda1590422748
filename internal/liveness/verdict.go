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
	SourceIdle      Source = "idle"
	SourceHeartbeat Source = "heartbeat"
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
}

// Judge combines the evidence for one consumer into a verdict.
//
// The rule, in order:
//  1. A fresh heartbeat, or a read attempt more recent than the read grace,
//     is strong evidence of life: Alive.
//  2. A source that could not answer makes the verdict Unknown.
//  3. With heartbeats configured, a stale or missing heartbeat is Ghost (the
//     consumer has also not been read from within the grace, by rule 1).
//  4. With only the idle source, idle past ghostIdle is Ghost.
//
// The read grace is ghostIdle when the idle source is configured, otherwise
// the heartbeat max age: a read is as good a sign of life as a heartbeat.
func Judge(spec Spec, ev Evidence) (Verdict, []Reason) {
	reasons := make([]Reason, 0, 3)
	if !ev.Listed {
		return Unknown, append(reasons, Reason{Source: SourceIdle, Detail: "consumer is in the pending summary but not in XINFO CONSUMERS", Age: -1})
	}
	grace := spec.readGrace()
	seenRecently := ev.Seen < grace
	seen := Reason{Source: SourceIdle, Detail: "last read attempt", Age: ev.Seen}
	if ev.Inactive >= 0 {
		seen.Detail = fmt.Sprintf("last read attempt; last successful read %s ago", ev.Inactive.Round(time.Millisecond))
	}
	reasons = append(reasons, seen)

	if !spec.Heartbeat {
		if seenRecently {
			return Alive, reasons
		}
		reasons[0].Detail += fmt.Sprintf(", past ghostIdle %s", spec.GhostIdle)
		return Ghost, reasons
	}

	hb := ev.Heartbeat
	switch hb.State {
	case HeartbeatFresh:
		return Alive, append(reasons, Reason{Source: SourceHeartbeat, Detail: "fresh heartbeat at " + hb.Key, Age: hb.Age})
	case HeartbeatStale:
		reasons = append(reasons, Reason{Source: SourceHeartbeat, Detail: fmt.Sprintf("heartbeat at %s older than max age %s", hb.Key, spec.HeartbeatMaxAge), Age: hb.Age})
	case HeartbeatMissing:
		reasons = append(reasons, Reason{Source: SourceHeartbeat, Detail: "no heartbeat at " + hb.Key, Age: -1})
	case HeartbeatError:
		reasons = append(reasons, Reason{Source: SourceHeartbeat, Detail: "heartbeat unreadable: " + hb.Err, Age: -1})
	default:
		reasons = append(reasons, Reason{Source: SourceHeartbeat, Detail: "heartbeat not read yet", Age: -1})
	}
	if seenRecently {
		return Alive, reasons
	}
	if hb.State == HeartbeatError || hb.State == HeartbeatUnread {
		return Unknown, reasons
	}
	return Ghost, reasons
}

// ReasonsString joins reasons for a log line.
func ReasonsString(rs []Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}
