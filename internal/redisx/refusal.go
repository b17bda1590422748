package redisx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// WritesRefused is the error of a write Redis refused, or would: its node
// answers OOM, MISCONF, READONLY or NOREPLICAS. Nothing of it was done;
// a caller stops there rather than meet the refusal again entry by entry.
type WritesRefused struct {
	Conn    string
	Refusal liveness.Refusal
}

func (e *WritesRefused) Error() string {
	return fmt.Sprintf("redis %q refuses writes (%s: %s): nothing was changed", e.Conn, e.Refusal, e.Refusal.Cause())
}

// IsWritesRefused says err is Redis refusing writes, as a WritesRefused or
// as the node's own reply: its connection reports that once, so a caller
// that meets it logs nothing of its own.
func IsWritesRefused(err error) bool {
	var refused *WritesRefused
	return errors.As(err, &refused) || RefusalOf(err) != liveness.RefusalNone
}

// RefusalOf is the refusal err answers a write with, RefusalNone for any
// other error (go-redis types all but MISCONF).
func RefusalOf(err error) liveness.Refusal {
	switch {
	case err == nil:
		return liveness.RefusalNone
	case redis.IsOOMError(err):
		return liveness.RefusalOOM
	case redis.HasErrorPrefix(err, "MISCONF "):
		return liveness.RefusalMisconf
	case redis.IsReadOnlyError(err):
		return liveness.RefusalReadonly
	case redis.IsNoReplicasError(err):
		return liveness.RefusalNoReplicas
	}
	return liveness.RefusalNone
}

// refusalIn is the refusal a script's caught error shows, as an outcome's
// detail gives it ("requeue: OOM command not allowed ...").
func refusalIn(detail string) liveness.Refusal {
	for _, r := range liveness.Refusals {
		p := r.String() + " "
		if strings.HasPrefix(detail, p) || strings.Contains(detail, ": "+p) {
			return r
		}
	}
	return liveness.RefusalNone
}

// sample is what one look at a node says of its writes.
type sample struct {
	// refused counts the writes the node refused so far, by refusal
	// (INFO errorstats); errKnown says INFO gave the section.
	refused  refusalCounts
	errKnown bool
	// evicted is evicted_keys; evictKnown says INFO stats gave it.
	evicted    int64
	evictKnown bool
}

// refusalCounts counts refused writes by refusal.
type refusalCounts [liveness.RefusalNoReplicas + 1]int64

// infoSections are the INFO sections a sample reads (several at once:
// Redis 7.0 and later). errorstats counts the errors Redis answered, by
// their prefix: a rise of OOM, MISCONF, READONLY or NOREPLICAS between two
// samples is writes refused meanwhile, to whoever sent them, which is what
// a heartbeat that could not be written is. So neither the state that
// refuses writes (memory, persistence, replication) nor CONFIG, which
// would need a grant that reads every setting, is asked: a node that
// refuses writes nobody sends loses no heartbeat.
var infoSections = []string{"stats", "errorstats"}

// parseSample reads a node's INFO stats and errorstats.
func parseSample(info string) sample {
	s := sample{}
	if v := infoField(info, "evicted_keys"); v != "" {
		s.evicted, _ = strconv.ParseInt(v, 10, 64)
		s.evictKnown = true
	}
	if strings.Contains(info, "# Errorstats") {
		s.errKnown = true
		for _, r := range liveness.Refusals {
			s.refused[r] = errorCount(infoField(info, "errorstat_"+r.String()))
		}
	}
	return s
}

// errorCount reads an errorstat value, "count=N".
func errorCount(v string) int64 {
	c, _, _ := strings.Cut(strings.TrimPrefix(v, "count="), ",")
	n, _ := strconv.ParseInt(c, 10, 64)
	return n
}

// refusal is the first refusal, in Refusals' order, whose refused writes
// rose since before, the counts of the node's previous sample; none where
// there are no counts to compare (the node's first sample, which its
// first stretch of readability covers) or they went down (a restart or
// CONFIG RESETSTAT).
func (s sample) refusal(before refusalCounts, known bool) liveness.Refusal {
	if !known || !s.errKnown {
		return liveness.RefusalNone
	}
	for _, r := range liveness.Refusals {
		if s.refused[r] > before[r] {
			return r
		}
	}
	return liveness.RefusalNone
}

// Refused is the refusal that left the entry untouched, RefusalNone
// unless its write failed on one.
func (o EntryOutcome) Refused() liveness.Refusal {
	if o.Outcome != Failed {
		return liveness.RefusalNone
	}
	return refusalIn(o.Detail)
}

// RefusedIn is the refusal that a batch's failed entries show, the first
// in Refusals' order; RefusalNone when none does.
func RefusedIn(r Result) liveness.Refusal {
	out := liveness.RefusalNone
	for _, o := range r.Outcomes {
		if ref := o.Refused(); ref != liveness.RefusalNone && (out == liveness.RefusalNone || ref < out) {
			out = ref
		}
	}
	return out
}
