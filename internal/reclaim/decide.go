// Package reclaim is pelwarden's one engine for everything that changes a
// consumer group: Decide turns a snapshot and the hygiene settings into
// steps, and an Engine executes a step through the guarded scripts,
// paging, re-reading the owner's threshold at each page, predicting in a
// dry run with the same script, and publishing events and metrics. The
// hygiene scan, the operator's Plan, Reclaim and DeleteConsumer, and a
// worker's Deregister are all callers of it, so a guard added here holds
// for every one of them, and what Plan reports is what the scan does.
package reclaim

import (
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Action is what a step does with one consumer.
type Action string

// Actions. DeadLetter is never decided: a report names a step so when
// every entry it took went to the dead-letter stream.
const (
	Requeue Action = "requeue"
	Claim   Action = "claim"
	// Release gives entries back with XNACK, each keeping its id, for the
	// group's claiming readers (policy.ReclaimRelease).
	Release        Action = "release"
	DeadLetter     Action = "dead-letter"
	DeleteConsumer Action = "delete-consumer"
	None           Action = "none"
)

// rule says how a step's threshold is taken again at each page.
type rule int

const (
	// ruleLoop: policy.ReclaimThreshold, the hygiene loop's rule.
	ruleLoop rule = iota
	// ruleOperator: policy.OperatorThreshold, an operator's Reclaim.
	ruleOperator
	// ruleFixed: the threshold never changes (a worker's own Deregister).
	ruleFixed
)

// Step is one decision about one consumer.
type Step struct {
	// Owner is the consumer as the snapshot judged it.
	Owner  liveness.ConsumerView
	Action Action
	// MinIdle is how long an entry must have been idle to be taken, or,
	// for DeleteConsumer, how long the name must have been unused.
	MinIdle time.Duration
	// ClaimTo is the consumer that receives the entries of a Claim step.
	ClaimTo string
	// Skip is why a None step leaves entries with their owner, when the
	// owner holds some and the reason is one the metrics count.
	Skip redisx.Outcome
	// Reason says why, in words an operator can act on.
	Reason string

	rule  rule
	seen  bool
	force bool
	// ackDel says the server may acknowledge and delete in one XACKDEL
	// (set at execution, from the server's capabilities).
	ackDel bool
}

// Decide is what one hygiene scan does with each consumer of snap, in the
// snapshot's order: take a ghost's or a degraded owner's entries past its
// threshold (and a live owner's past the hard timeout), delete a ghost
// whose PEL is empty, and leave everything else, saying why. Claims are
// spread by a running tally (policy.ClaimTally). It is pure.
func Decide(snap *liveness.Snapshot, h policy.Hygiene, now time.Time) []Step {
	if snap == nil || snap.StreamMissing || snap.GroupMissing {
		return nil
	}
	steps := make([]Step, 0, len(snap.Consumers))
	// Claims made earlier in this decision count against their receiver,
	// so one scan spreads its claims over the live consumers.
	claims := policy.ClaimTally{}
	for _, cv := range snap.Consumers {
		steps = append(steps, decideOne(cv, snap.Consumers, claims, h, now))
	}
	return steps
}

func decideOne(owner liveness.ConsumerView, consumers []liveness.ConsumerView, claims policy.ClaimTally, h policy.Hygiene, now time.Time) Step {
	st := Step{Owner: owner, Action: None, rule: ruleLoop, seen: true}
	if liveness.IsHolder(owner.Name) {
		return decideHolder(st, h)
	}
	threshold, reclaimable := policy.ReclaimThreshold(owner, h, now)
	switch {
	case h.Mode == policy.ReclaimOff:
		st.Reason = "reclaim is off"
	case owner.Pending == 0:
		return decideEmpty(st, h)
	case owner.Verdict == liveness.Unknown:
		st.Skip = redisx.OwnerUnknown
		st.Reason = fmt.Sprintf("liveness is Unknown (%s): hygiene never acts on it; its %d entries stay", policy.Reasons(owner), owner.Pending)
	case !reclaimable:
		st.Reason = fmt.Sprintf("alive (%s) and hardTimeoutSeconds is off: its %d entries stay with it", policy.Reasons(owner), owner.Pending)
	default:
		st.Action, st.MinIdle, st.Reason = Requeue, threshold, why(owner, h, threshold)
		if h.Mode == policy.ReclaimRelease {
			st.Action = Release
		}
		if h.Mode != policy.ReclaimClaim {
			return st
		}
		if to, ok := claims.Pick(consumers, owner.Name); ok {
			st.Action, st.ClaimTo = Claim, to
		} else if h.ClaimFallback == policy.FallbackSkip {
			st.Action, st.Skip = None, redisx.NoLiveConsumer
			st.Reason += fmt.Sprintf(", but no consumer is Alive to claim its %d entries and claimFallback is skip", owner.Pending)
		} else {
			st.Reason += "; no consumer is Alive to claim them, so they are requeued (claimFallback requeue)"
		}
	}
	return st
}

// decideEmpty is the step for an owner that holds nothing: delete it if it
// is a ghost quiet long enough, else leave it.
func decideEmpty(st Step, h policy.Hygiene) Step {
	owner := st.Owner
	switch {
	case policy.ShouldDeleteConsumer(owner, h.EntryStale, h):
		st.Action, st.MinIdle = DeleteConsumer, h.EntryStale
		st.Reason = fmt.Sprintf("ghost (%s) with an empty PEL, quiet for %s: deleted", policy.Reasons(owner), owner.Idle.Round(time.Millisecond))
	case owner.Verdict != liveness.Ghost:
		st.Reason = "holds no entries"
	case !h.DeleteGhostConsumers:
		st.Reason = "ghost with an empty PEL; deleteGhostConsumers is off, so it stays"
	default:
		st.Reason = fmt.Sprintf("ghost with an empty PEL, but its name was used %s ago: deleted once it has been quiet for entryStaleSeconds (%s)",
			owner.Idle.Round(time.Millisecond), h.EntryStale)
	}
	return st
}

// Refused is an action the engine will not take, and why; nothing was
// changed.
type Refused struct{ Reason string }

func (r *Refused) Error() string { return r.Reason }

// DecideOperator is the step of an operator's Reclaim of owner's entries:
// the loop's threshold where the loop would take them; where it would not,
// entries idle at least entryStaleSeconds with force, and a refusal
// without. snap may be nil when no view knows the group (force only).
func DecideOperator(snap *liveness.Snapshot, owner string, h policy.Hygiene, now time.Time, force, claim bool) (Step, error) {
	cv, seen := liveness.ConsumerView{Name: owner}, false
	var consumers []liveness.ConsumerView
	if snap != nil {
		consumers = snap.Consumers
		for _, c := range consumers {
			if c.Name == owner {
				cv, seen = c, true
			}
		}
	}
	threshold, refusal := policy.OperatorThreshold(cv, seen, h, now, force)
	if refusal != "" {
		return Step{}, &Refused{Reason: refusal}
	}
	st := Step{Owner: cv, Action: Requeue, MinIdle: threshold, rule: ruleOperator, seen: seen, force: force, Reason: "operator's Reclaim"}
	if claim {
		to, ok := policy.PickReclaimTarget(consumers, owner, nil)
		if !ok {
			return Step{}, &Refused{Reason: fmt.Sprintf("mode claim: no consumer of the group other than %q is Alive to take the entries; use mode requeue", owner)}
		}
		st.Action, st.ClaimTo = Claim, to
	}
	return st, nil
}

// Drain is the step of a worker giving back its own PEL: every entry,
// whatever its idle time.
func Drain(consumer string) Step {
	return Step{Owner: liveness.ConsumerView{Name: consumer}, Action: Requeue, rule: ruleFixed, Reason: "the worker deregisters"}
}

// Delete is the step of deleting a consumer unused for minIdle, refused in
// the script while its PEL holds entries.
func Delete(consumer string, minIdle time.Duration) Step {
	return Step{Owner: liveness.ConsumerView{Name: consumer}, Action: DeleteConsumer, MinIdle: minIdle, rule: ruleFixed, Reason: "asked to delete it"}
}

// why says why an owner's entries may be taken at all.
func why(owner liveness.ConsumerView, h policy.Hygiene, threshold time.Duration) string {
	switch {
	case owner.Verdict == liveness.Ghost && !owner.GoneAt.IsZero() && threshold < h.EntryStale:
		return fmt.Sprintf("ghost: its pod went %s ago, so entries idle since then are taken", threshold.Round(time.Millisecond))
	case owner.Verdict == liveness.Ghost:
		return fmt.Sprintf("ghost (%s)", policy.Reasons(owner))
	case owner.Verdict == liveness.Degraded:
		return fmt.Sprintf("degraded (%s): its stale entries are given back", policy.Reasons(owner))
	default:
		return fmt.Sprintf("alive (%s), but entries idle past hardTimeoutSeconds are taken", policy.Reasons(owner))
	}
}
