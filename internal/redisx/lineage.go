package redisx

// The lineage fields of a requeued copy (lua/guard.lua, lineage): the
// stream and id of the first original of its job, the entry a producer
// added. A copy of a copy keeps naming that first entry, so every
// delivery of one job, however often it was requeued, names one original:
// a worker that records the jobs it finished under that name (an entry's
// own stream and id when it has none) can tell a second delivery of a job
// from a second job. A dead-letter record of a copy keeps them as the
// job's fields, beside its own pelwarden-origin-* fields, which name the
// entry that was dead-lettered.
const (
	FieldOriginalStream = "pelwarden-original-stream"
	FieldOriginalID     = "pelwarden-original-id"
)
