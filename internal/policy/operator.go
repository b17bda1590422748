package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Reasons says why a consumer was judged as it was, for messages.
func Reasons(c liveness.ConsumerView) string {
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
	if h.ClaimingReaders {
		parts = append(parts, "claimingReaders=true")
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
		return 0, fmt.Sprintf("consumer %q has Unknown liveness (%s) and pelwarden never takes entries from an owner it cannot judge; %s", owner.Name, Reasons(owner), hint)
	default:
		return 0, fmt.Sprintf("consumer %q is Alive (%s) and hardTimeoutSeconds is off, so its entries are its own; %s", owner.Name, Reasons(owner), hint)
	}
}
