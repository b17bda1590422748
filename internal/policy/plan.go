package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Plan actions, as the Admin API names them.
const (
	ActionRequeue        = "requeue"
	ActionClaim          = "claim"
	ActionDeadLetter     = "dead-letter"
	ActionDeleteConsumer = "delete-consumer"
	ActionNone           = "none"
)

// Stale is what paging an owner's PEL at its reclaim threshold found.
type Stale struct {
	// Entries is the entries idle at least the threshold.
	Entries int64
	// AtMaxDeliveries is those of them whose delivery count, as Redis keeps
	// it, reaches maxDeliveries. A count carried across requeues can only
	// add to it, so this is a lower bound.
	AtMaxDeliveries int64
}

// Step is what one hygiene scan would do with one consumer.
type Step struct {
	Action string
	// Entries is the entries the step would take (requeue or claim, and
	// dead-letter); DeadLetter is those of them dead-lettered.
	Entries, DeadLetter int64
	// ClaimTo is the consumer claimed entries would go to.
	ClaimTo string
	// Reason says why, in words an operator can act on.
	Reason string
}

// PlanStep decides what a scan would do with owner, given what paging its
// PEL at ReclaimThreshold found (zero when there was nothing to page). It
// follows the loop: reclaim an owner's entries past its threshold, then
// delete a ghost whose PEL is empty. claims is the plan's running tally,
// as the scan keeps one, so that claims spread as the scan spreads them.
func PlanStep(owner liveness.ConsumerView, consumers []liveness.ConsumerView, h Hygiene, now time.Time, stale Stale, claims ClaimTally) Step {
	threshold, reclaimable := ReclaimThreshold(owner, h, now)
	none := func(format string, args ...any) Step {
		return Step{Action: ActionNone, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case h.Mode == ReclaimOff:
		return none("reclaim is off")
	case owner.Pending == 0:
		return planEmpty(owner, h)
	case owner.Verdict == liveness.Unknown:
		return none("liveness is Unknown (%s): hygiene never acts on it; its %d entries stay", reasons(owner), owner.Pending)
	case !reclaimable:
		return none("alive (%s) and hardTimeoutSeconds is off: its %d entries stay with it", reasons(owner), owner.Pending)
	case stale.Entries == 0:
		return none("%s, but none of its %d entries has been idle %s yet", why(owner, h, threshold), owner.Pending, threshold)
	}
	step := Step{Action: ActionRequeue, Entries: stale.Entries, DeadLetter: stale.AtMaxDeliveries}
	var notes []string
	if h.Mode == ReclaimClaim {
		if to, ok := claims.Pick(consumers, owner.Name); ok {
			step.Action, step.ClaimTo = ActionClaim, to
		} else if h.ClaimFallback == FallbackSkip {
			return none("%s, but no consumer is Alive to claim its %d entries and claimFallback is skip", why(owner, h, threshold), stale.Entries)
		} else {
			notes = append(notes, "no consumer is Alive to claim them, so they are requeued (claimFallback requeue)")
		}
	}
	if step.DeadLetter > 0 && step.DeadLetter == step.Entries {
		step.Action = ActionDeadLetter
	}
	head := fmt.Sprintf("%s: %d of its %d entries have been idle %s or more", why(owner, h, threshold), stale.Entries, owner.Pending, threshold)
	if step.DeadLetter > 0 {
		notes = append(notes, fmt.Sprintf("at least %d have been delivered %d times and go to %s", step.DeadLetter, h.MaxDeliveries, h.DeadLetterStream))
	}
	if owner.Verdict == liveness.Ghost && h.DeleteGhostConsumers {
		notes = append(notes, "the consumer is deleted on a later scan once its PEL is empty")
	}
	if h.DryRun {
		notes = append(notes, "dryRun is on: hygiene only reports this")
	}
	step.Reason = strings.Join(append([]string{head}, notes...), "; ")
	return step
}

// planEmpty is the step for an owner that holds nothing: delete it if it is
// a ghost quiet long enough, else leave it.
func planEmpty(owner liveness.ConsumerView, h Hygiene) Step {
	step := Step{Action: ActionNone}
	switch {
	case ShouldDeleteConsumer(owner, h.EntryStale, h):
		step.Action = ActionDeleteConsumer
		step.Reason = fmt.Sprintf("ghost (%s) with an empty PEL, quiet for %s: deleted", reasons(owner), owner.Idle.Round(time.Millisecond))
		if h.DryRun {
			step.Reason += "; dryRun is on: hygiene only reports this"
		}
	case owner.Verdict != liveness.Ghost:
		step.Reason = "holds no entries"
	case !h.DeleteGhostConsumers:
		step.Reason = "ghost with an empty PEL; deleteGhostConsumers is off, so it stays"
	default:
		step.Reason = fmt.Sprintf("ghost with an empty PEL, but its name was used %s ago: deleted once it has been quiet for entryStaleSeconds (%s)",
			owner.Idle.Round(time.Millisecond), h.EntryStale)
	}
	return step
}

// why says why an owner's entries may be taken at all.
func why(owner liveness.ConsumerView, h Hygiene, threshold time.Duration) string {
	switch {
	case owner.Verdict == liveness.Ghost && !owner.GoneAt.IsZero() && threshold < h.EntryStale:
		return fmt.Sprintf("ghost: its pod went %s ago, so entries idle since then are taken", threshold.Round(time.Millisecond))
	case owner.Verdict == liveness.Ghost:
		return fmt.Sprintf("ghost (%s)", reasons(owner))
	case owner.Verdict == liveness.Degraded:
		return fmt.Sprintf("degraded (%s): its stale entries are given back", reasons(owner))
	default:
		return fmt.Sprintf("alive (%s), but entries idle past hardTimeoutSeconds are taken", reasons(owner))
	}
}

func reasons(c liveness.ConsumerView) string {
	if len(c.Reasons) == 0 {
		return "no reasons recorded"
	}
	return liveness.ReasonsString(c.Reasons)
}

// Describe renders the settings as the metadata keys that set them, for
// operators.
func (h Hygiene) Describe() string {
	secs := func(d time.Duration) string {
		if d == 0 {
			return "0"
		}
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	}
	parts := []string{
		"reclaim=" + string(h.Mode),
		"entryStaleSeconds=" + secs(h.EntryStale),
		"hardTimeoutSeconds=" + secs(h.HardTimeout),
		"maxDeliveries=" + strconv.FormatInt(h.MaxDeliveries, 10),
	}
	if h.MaxDeliveries > 0 {
		parts = append(parts, "deadLetterStream="+h.DeadLetterStream)
	}
	field := h.DeliveryCountField
	if field == "" {
		field = "off"
	}
	parts = append(parts, "deliveryCountField="+field,
		"deleteGhostConsumers="+strconv.FormatBool(h.DeleteGhostConsumers),
		"deleteOriginal="+strconv.FormatBool(h.DeleteOriginal))
	if h.Mode == ReclaimClaim {
		parts = append(parts, "claimFallback="+string(h.ClaimFallback))
	}
	return strings.Join(append(parts, "dryRun="+strconv.FormatBool(h.DryRun)), " ")
}

// OperatorThreshold is the idle time from which an operator's Reclaim may
// take owner's entries. It is the loop's threshold where the loop would take
// them. Where it would not (an Alive owner without hardTimeoutSeconds, an
// Unknown one, or a name the view has not seen), force takes entries idle at
// least entryStaleSeconds; without force the reclaim is refused, and refusal
// says why.
func OperatorThreshold(owner liveness.ConsumerView, seen bool, h Hygiene, now time.Time, force bool) (threshold time.Duration, refusal string) {
	if seen {
		if t, ok := ReclaimThreshold(owner, h, now); ok {
			if force {
				t = min(t, h.EntryStale)
			}
			return t, ""
		}
	}
	if force {
		return h.EntryStale, ""
	}
	hint := fmt.Sprintf("pass force to take its entries idle at least entryStaleSeconds (%s)", h.EntryStale)
	switch {
	case !seen:
		return 0, fmt.Sprintf("consumer %q is not among the group's consumers as pelwarden last read them, so its liveness is unknown; %s", owner.Name, hint)
	case owner.Verdict == liveness.Unknown:
		return 0, fmt.Sprintf("consumer %q has Unknown liveness (%s) and pelwarden never takes entries from an owner it cannot judge; %s", owner.Name, reasons(owner), hint)
	default:
		return 0, fmt.Sprintf("consumer %q is Alive (%s) and hardTimeoutSeconds is off, so its entries are its own; %s", owner.Name, reasons(owner), hint)
	}
}
