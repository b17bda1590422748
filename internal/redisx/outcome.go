package redisx

// Outcome is what happened, or in a dry run would happen, to one pending
// entry or one consumer. It is pelwarden's one vocabulary for that: the
// guarded scripts return these names, and the reclaim engine's reports,
// the events, the metric labels and the Admin API use them unchanged.
type Outcome string

// Actions: the entry or the consumer was changed.
const (
	// Requeued: a copy was added to the stream and the original acknowledged.
	Requeued Outcome = "requeued"
	// Claimed: the entry moved to a live consumer's PEL.
	Claimed Outcome = "claimed"
	// Released: the entry is pending with no owner (XNACK), keeping its
	// id, for a reader that claims to take.
	Released Outcome = "released"
	// DeadLettered: a record went to the dead-letter stream and the
	// original was acknowledged.
	DeadLettered Outcome = "dead-lettered"
	// DeadLetterHeld: step 1 of the two-step dead-letter path moved the
	// entry to the holding consumer; its record and acknowledgement follow.
	DeadLetterHeld Outcome = "dead-letter-held"
	// Tombstoned: the stream entry had been deleted; its PEL id was
	// acknowledged.
	Tombstoned Outcome = "tombstoned"
	// ConsumerDeleted: a consumer with an empty PEL was deleted.
	ConsumerDeleted Outcome = "consumer-deleted"
)

// Entries left pending, exactly as they were, for a reason an operator
// must fix: they are never taken until then.
const (
	// Failed means a write failed.
	Failed Outcome = "failed"
	// FieldCollision means the entry holds, as a field of its own, a field
	// pelwarden would write: the carry field (deliveryCountField), its
	// marker pelwarden-carried, or a field of the dead-letter record.
	// pelwarden never writes over a field of a job.
	FieldCollision Outcome = "field-collision"
)

// Skips a script's guard found: the entry was no longer fit to touch.
const (
	NotPending   Outcome = "not-pending"
	OwnerChanged Outcome = "owner-changed"
	NotIdle      Outcome = "not-idle"
	// DuplicateID: the batch named the entry already (under another id).
	DuplicateID Outcome = "duplicate-id"
)

// Skips of a consumer delete, checked in the same script as the delete.
const (
	// DeleteHasPending: the consumer holds entries; deleting it would drop them.
	DeleteHasPending Outcome = "delete-has-pending"
	// DeleteNotIdle: the name was used more recently than the threshold.
	DeleteNotIdle Outcome = "delete-not-idle"
	// DeleteGone: there is no such consumer.
	DeleteGone Outcome = "delete-gone"
)

// Skips the reclaim engine decides before any script runs.
const (
	// OwnerUnknown: the owner's liveness is Unknown, and Unknown is never acted on.
	OwnerUnknown Outcome = "owner-unknown"
	// NoLiveConsumer: claim mode found no live consumer and claimFallback is skip.
	NoLiveConsumer Outcome = "no-live-consumer"
	// ReleaseUnsupported: release mode met a server without XNACK (before
	// Redis 8.8, Valkey before 9.2); the entries stay with their owner.
	ReleaseUnsupported Outcome = "release-unsupported"
)

// Deregistered is the event of a worker's Deregister call that deleted
// its consumer; the entries it gave back have events of their own.
const Deregistered Outcome = "deregistered"

// Acted reports whether the outcome changed Redis.
func (o Outcome) Acted() bool {
	switch o {
	case Requeued, Claimed, Released, DeadLettered, DeadLetterHeld, Tombstoned, ConsumerDeleted:
		return true
	}
	return false
}

// Taken reports whether the outcome gave an entry back to the group:
// what a reclaim step counts as its entries.
func (o Outcome) Taken() bool {
	switch o {
	case Requeued, Claimed, Released, DeadLettered, Tombstoned:
		return true
	}
	return false
}

// Stuck reports whether the entry was left pending for a reason an
// operator must fix: a failed write or a field collision.
func (o Outcome) Stuck() bool {
	return o == Failed || o == FieldCollision
}
