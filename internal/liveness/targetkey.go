package liveness

// TargetKey is a target's identity as a comparable value: two targets have
// equal TargetKeys exactly when their Keys are equal, and none is built as
// a string, so a map keyed by it costs a poll no allocation.
type TargetKey struct{ k viewKey }

// Comparable returns t's TargetKey.
func (t Target) Comparable() TargetKey { return TargetKey{keyOf(t)} }
