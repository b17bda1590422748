package reclaim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Explanation is a step as an operator reads it, from what executing it
// did, or in a dry run would do.
type Explanation struct {
	Action Action
	// Entries is the entries the step takes: requeued or claimed,
	// dead-lettered and tombstoned.
	Entries, DeadLetter, Tombstones int64
	ClaimTo                         string
	Reason                          string
}

// Explain says what a step's execution did with its owner. A reclaim step
// that found no entry past its threshold did nothing, and says so; one
// whose every entry went to the dead-letter stream is a dead-letter step.
func Explain(res StepResult, h policy.Hygiene) Explanation {
	st := res.Step
	x := Explanation{Action: st.Action, Entries: res.Taken(), DeadLetter: res.Counts[redisx.DeadLettered],
		Tombstones: res.Counts[redisx.Tombstoned], ClaimTo: st.ClaimTo, Reason: st.Reason}
	switch st.Action {
	case Requeue, Claim, Release, FinishDeadLetter:
	case DeleteConsumer:
		if res.Counts[redisx.ConsumerDeleted] == 0 {
			x.Action = None
			x.Reason = fmt.Sprintf("%s; but the delete script found %s", st.Reason, outcomes(res.Counts))
		}
		return withDryRun(x, h)
	default:
		return x
	}
	if x.Entries == 0 && st.Action == FinishDeadLetter {
		x.Action = None
		x.Reason = fmt.Sprintf("%s; but none was finished (%s): they stay held", st.Reason, outcomes(res.Counts))
		return x
	}
	if x.Entries == 0 {
		x.Action, x.ClaimTo = None, ""
		x.Reason = fmt.Sprintf("%s, but none of its %d entries has been idle %s yet", st.Reason, st.Owner.Pending, st.MinIdle)
		if n := res.Counts[redisx.FieldCollision]; n > 0 {
			x.Reason = fmt.Sprintf("%s, but %d of its %d entries hold a field pelwarden would write over (%s) and stay pending untouched",
				st.Reason, n, st.Owner.Pending, collided(res.Failures))
		}
		if res.Stopped != "" {
			x.Reason += "; " + res.Stopped
		}
		return x
	}
	if x.DeadLetter == x.Entries {
		x.Action = DeadLetter
	}
	notes := []string{fmt.Sprintf("%s: %d of its %d entries have been idle %s or more", st.Reason, x.Entries, st.Owner.Pending, st.MinIdle)}
	if x.DeadLetter > 0 {
		notes = append(notes, fmt.Sprintf("%d have been delivered %d times and go to %s", x.DeadLetter, h.MaxDeliveries, h.DeadLetterStream))
	}
	if n := res.Counts[redisx.DeadLetterHeld]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s is in another Redis Cluster slot, so %d went by the holding consumer %s (two steps)", h.DeadLetterStream, n, liveness.DeadLetterHolder))
	}
	if x.Tombstones > 0 {
		notes = append(notes, fmt.Sprintf("%d were deleted from the stream and are only acknowledged", x.Tombstones))
	}
	if n := res.Counts[redisx.Failed]; n > 0 {
		notes = append(notes, fmt.Sprintf("%d writes failed and those entries stay", n))
	}
	if n := res.Counts[redisx.FieldCollision]; n > 0 {
		notes = append(notes, fmt.Sprintf("%d hold a field pelwarden would write over (%s) and stay pending untouched", n, collided(res.Failures)))
	}
	if res.Stopped != "" {
		notes = append(notes, res.Stopped)
	}
	if st.Owner.Verdict == liveness.Ghost && h.DeleteGhostConsumers {
		notes = append(notes, "the consumer is deleted on a later scan once its PEL is empty")
	}
	x.Reason = strings.Join(notes, "; ")
	return withDryRun(x, h)
}

func withDryRun(x Explanation, h policy.Hygiene) Explanation {
	if h.DryRun && x.Action != None {
		x.Reason += "; dryRun is on: hygiene only reports this"
	}
	return x
}

func outcomes(counts map[redisx.Outcome]int64) string {
	parts := make([]string, 0, len(counts))
	for o := range counts {
		parts = append(parts, string(o))
	}
	return strings.Join(parts, ", ")
}

// collided names the fields of the first field collisions.
func collided(stuck []redisx.EntryOutcome) string {
	var fields []string
	for _, o := range stuck {
		if o.Outcome == redisx.FieldCollision && !slices.Contains(fields, o.Detail) {
			fields = append(fields, o.Detail)
		}
	}
	return "field " + strings.Join(fields, ", ")
}
