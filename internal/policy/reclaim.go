package policy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// ReclaimMode is what hygiene does with entries it takes from an owner.
type ReclaimMode string

// Reclaim modes, named by the `reclaim` metadata values.
const (
	ReclaimOff     ReclaimMode = "off"
	ReclaimRequeue ReclaimMode = "requeue"
	ReclaimClaim   ReclaimMode = "claim"
	// ReclaimRelease gives entries back with XNACK (Redis 8.8): each keeps
	// its id and waits, with no owner, for a reader that claims. Only where
	// the group's readers claim (Hygiene.ClaimingReaders): `>` never
	// re-delivers a released entry.
	ReclaimRelease ReclaimMode = "release"
)

// NoCandidate is what claim mode does when no live consumer can take an
// entry.
type NoCandidate string

// Fallbacks when claim mode finds no live consumer.
const (
	FallbackRequeue NoCandidate = "requeue"
	FallbackSkip    NoCandidate = "skip"
)

// Hygiene is a target's hygiene settings.
type Hygiene struct {
	Mode ReclaimMode
	// EntryStale is how long an entry must be idle before any action.
	EntryStale time.Duration
	// HardTimeout reclaims entries idle this long even from a live owner; 0 is off.
	HardTimeout time.Duration
	// MaxDeliveries dead-letters an entry delivered this many times; 0 is off.
	MaxDeliveries int64
	// DeadLetterStream receives dead-lettered entries.
	DeadLetterStream string
	// DeliveryCountField carries the delivery count across requeues; empty is off.
	DeliveryCountField string
	// DeleteGhostConsumers deletes a ghost consumer once its PEL is empty.
	DeleteGhostConsumers bool
	// DeleteOriginal XDELs an entry after requeueing or dead-lettering it.
	DeleteOriginal bool
	// ClaimFallback applies in claim mode when no consumer can take an entry.
	ClaimFallback NoCandidate
	// ClaimingReaders says the group's workers claim idle and released
	// entries as they read (XREADGROUP ... CLAIM, or XAUTOCLAIM), so a
	// released entry is read again; release mode needs it.
	ClaimingReaders bool
	// DryRun decides and reports but changes nothing.
	DryRun bool
}

// String is a stable text form, part of a hygiene target's identity.
func (h Hygiene) String() string {
	return fmt.Sprintf("%s|%s|%s|%d|%s|%s|%t|%t|%s|%t|%t", h.Mode, h.EntryStale, h.HardTimeout, h.MaxDeliveries,
		h.DeadLetterStream, h.DeliveryCountField, h.DeleteGhostConsumers, h.DeleteOriginal, h.ClaimFallback, h.DryRun, h.ClaimingReaders)
}

// ReclaimThreshold is the idle time from which an owner's entries may be
// reclaimed, and whether any may be: a ghost's or a degraded owner's
// entries once stale, a live owner's only past the hard timeout, an Unknown
// owner's never. A degraded owner is alive but says it cannot do the work,
// so what it holds waits for nothing; entryStaleSeconds still gives an
// entry it is finishing the time to be acknowledged.
//
// A ghost known dead because its pod went at GoneAt gives up every entry
// idle since then, stale or not: such an entry was last delivered before
// the pod went, so no live process can still acknowledge it, and waiting
// for entryStaleSeconds would only delay recovery.
func ReclaimThreshold(owner liveness.ConsumerView, h Hygiene, now time.Time) (time.Duration, bool) {
	if h.Mode == ReclaimOff {
		return 0, false
	}
	switch owner.Verdict {
	case liveness.Ghost:
		if !owner.GoneAt.IsZero() {
			return min(h.EntryStale, max(now.Sub(owner.GoneAt), 0)), true
		}
		return h.EntryStale, true
	case liveness.Degraded:
		return h.EntryStale, true
	case liveness.Alive:
		if h.HardTimeout > 0 {
			return max(h.HardTimeout, h.EntryStale), true
		}
	}
	return 0, false
}

// ShouldDeadLetter reports whether an entry delivered deliveries times
// (carried count included) goes to the dead-letter stream. The reclaim
// script applies the same rule where the carried count is read.
func ShouldDeadLetter(deliveries, maxDeliveries int64) bool {
	return maxDeliveries > 0 && deliveries >= maxDeliveries
}

// ShouldDeleteConsumer reports whether a consumer may be deleted: a ghost
// with an empty PEL, idle past the threshold. The delete script checks the
// PEL and idle again in the same step as the delete.
func ShouldDeleteConsumer(c liveness.ConsumerView, minIdle time.Duration, h Hygiene) bool {
	return h.DeleteGhostConsumers && h.Mode != ReclaimOff && c.Verdict == liveness.Ghost && c.Pending == 0 && c.Idle >= minIdle
}

// PickReclaimTarget chooses the consumer that receives owner's entries in
// claim mode: never the owner, only Alive consumers (never a Degraded,
// Ghost or Unknown one), then the one this scan has sent the fewest
// entries so far (claimed, by consumer; nil is none), then the freshest
// heartbeat (consumers with one before those without), then the fewest
// pending, then the name, so the choice is stable. The first pick of a
// scan goes to the freshest heartbeat; the tally spreads the next ones,
// because the snapshot's pending counts do not move within a scan.
//
// A consumer whose pod is terminating or has gone (Alive only for its
// grace, or as a shared name) is never chosen: it is about to stop, and
// the claim itself would count as a read under its name after its pod
// went, making it look like a shared name that holds the entries.
func PickReclaimTarget(consumers []liveness.ConsumerView, owner string, claimed map[string]int64) (string, bool) {
	var cands []liveness.ConsumerView
	for _, c := range consumers {
		leaving := c.Pod == liveness.PodTerminating || c.Pod == liveness.PodGone
		if c.Name != owner && c.Verdict == liveness.Alive && !leaving {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	best := slices.MinFunc(cands, func(a, b liveness.ConsumerView) int {
		if by := cmp.Compare(claimed[a.Name], claimed[b.Name]); by != 0 {
			return by
		}
		ah, bh := a.HeartbeatAge >= 0, b.HeartbeatAge >= 0
		if ah != bh {
			if ah {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.HeartbeatAge, b.HeartbeatAge), cmp.Compare(a.Pending, b.Pending), cmp.Compare(a.Name, b.Name))
	})
	return best.Name, true
}

// ClaimTally is the running count of one scan's claims, by receiving
// consumer. The zero value (nil) picks without spreading.
type ClaimTally map[string]int64

// Pick chooses the consumer that receives owner's entries
// (PickReclaimTarget) and counts the owner's pending entries against it, so
// the scan's next pick goes elsewhere.
func (t ClaimTally) Pick(consumers []liveness.ConsumerView, owner string) (string, bool) {
	to, ok := PickReclaimTarget(consumers, owner, t)
	if !ok || t == nil {
		return to, ok
	}
	for _, c := range consumers {
		if c.Name == owner {
			t[to] += max(c.Pending, 1)
		}
	}
	return to, ok
}

// ReservedFields are the fields pelwarden itself adds to an entry: the
// marker of a requeued copy's carried count, its lineage fields and a
// dead-letter record's fields (internal/redisx/lua). A carry field
// (deliveryCountField) of one of these names would collide with
// pelwarden's own; the default carry field, pelwarden-deliveries, is the
// one a dead-letter record also writes, with the same meaning, so it is
// allowed.
var ReservedFields = []string{"pelwarden-carried", "pelwarden-original-stream", "pelwarden-original-id", "pelwarden-origin-id",
	"pelwarden-origin-stream", "pelwarden-group", "pelwarden-consumer", "pelwarden-reason"}

// ReservedField reports whether name is one of ReservedFields.
func ReservedField(name string) bool {
	return slices.Contains(ReservedFields, name)
}
