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

// SourcePelwarden is the source of the holder's verdict: pelwarden knows
// its own name. It is not a source a target can be configured with.
const SourcePelwarden Source = "pelwarden"

// holderReason is the one reason the holder is judged by.
var holderReason = Reason{Source: SourcePelwarden, Detail: "pelwarden's dead-letter holder: its entries are on their way to the dead-letter stream", Age: -1}

// addHolder counts the holder: Alive, so nothing acts on it as on a
// worker, and its entries apart from the work the scaler counts.
func (s *Snapshot) addHolder(cv ConsumerView) {
	cv.Verdict, cv.Reasons = Alive, []Reason{holderReason}
	s.HeldPending += cv.Pending
	s.Consumers = append(s.Consumers, cv)
}
