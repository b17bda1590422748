package liveness

// DeadLetterHolder is the reserved consumer of the two-step dead-letter
// path: a poison entry whose dead-letter stream is in another Redis
// Cluster slot waits under this name, in its own group, between being
// taken from its owner and being acknowledged once its record is written.
// It is pelwarden's, never a worker's: it is never judged a ghost, never
// deleted, and what it holds is on its way out, not work for a replica.
const DeadLetterHolder = "pelwarden:dead-letter"

// IsHolder reports whether a consumer name is pelwarden's own holder.
func IsHolder(name string) bool { return name == DeadLetterHolder }
