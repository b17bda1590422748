package redisx

import (
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

// sample is what one look at a node's state says of its writes.
type sample struct {
	// state is the refusal the node's state makes certain: used memory
	// past maxmemory with noeviction, a replica, min-replicas-to-write
	// with no replica in sync. maybeMisconf says the last RDB save or AOF
	// write failed, which refuses writes only under settings INFO does
	// not show (stop-writes-on-bgsave-error, save points).
	state        liveness.Refusal
	maybeMisconf bool
	// refused counts the writes the node refused so far, by refusal
	// (INFO errorstats); errKnown says INFO gave the section.
	refused  refusalCounts
	errKnown bool
	// evicted is evicted_keys; evictKnown says INFO stats gave it.
	evicted    int64
	evictKnown bool
	// mayEvict says maxmemory is set and maxmemory-policy may evict
	// keys (allkeys-*, volatile-*).
	mayEvict bool
}

// refusalCounts counts refused writes by refusal.
type refusalCounts [liveness.RefusalNoReplicas + 1]int64

// infoSections are the INFO sections a sample reads (several at once:
// Redis 7.0 and later). errorstats counts the errors Redis answered, by
// prefix: a rise of OOM, MISCONF, READONLY or NOREPLICAS between two
// samples is writes refused meanwhile, to whoever sent them. CONFIG,
// which would say the settings INFO leaves out, is not asked: it needs a
// grant that reads every setting, passwords included.
var infoSections = []string{"memory", "persistence", "replication", "stats", "errorstats"}

// parseSample reads a node's INFO memory, persistence, replication, stats
// and errorstats.
func parseSample(info string) sample {
	f := func(k string) string { return infoField(info, k) }
	n := func(k string) int64 { v, _ := strconv.ParseInt(f(k), 10, 64); return v }
	s := sample{}
	if v := f("evicted_keys"); v != "" {
		s.evicted, s.evictKnown = n("evicted_keys"), true
	}
	if strings.Contains(info, "# Errorstats") {
		s.errKnown = true
		for _, r := range liveness.Refusals {
			s.refused[r] = errorCount(f("errorstat_" + r.String()))
		}
	}
	policy := f("maxmemory_policy")
	s.mayEvict = n("maxmemory") > 0 && (strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-"))
	s.maybeMisconf = f("rdb_last_bgsave_status") == "err" || (f("aof_enabled") == "1" && f("aof_last_write_status") == "err")
	switch {
	case f("role") == "slave":
		s.state = liveness.RefusalReadonly
	case f("min_slaves_good_slaves") == "0":
		// Shown only where min-replicas-to-write is set: at least 1.
		s.state = liveness.RefusalNoReplicas
	case n("maxmemory") > 0 && policy == "noeviction" && n("used_memory")-n("mem_not_counted_for_evict") > n("maxmemory"):
		s.state = liveness.RefusalOOM
	}
	return s
}

// errorCount reads an errorstat value, "count=N".
func errorCount(v string) int64 {
	c, _, _ := strings.Cut(strings.TrimPrefix(v, "count="), ",")
	n, _ := strconv.ParseInt(c, 10, 64)
	return n
}

// refusal is what sample s, after the node's previous counts of refused
// writes before (known when known), says of its writes now: the refusal
// its state makes certain, else the first whose refused writes rose,
// else, with no counts to compare, a failed save taken to refuse.
func (s sample) refusal(before refusalCounts, known bool) liveness.Refusal {
	if s.state != liveness.RefusalNone {
		return s.state
	}
	if known && s.errKnown {
		for _, r := range liveness.Refusals {
			if s.refused[r] > before[r] {
				return r
			}
		}
		return liveness.RefusalNone
	}
	if s.maybeMisconf {
		return liveness.RefusalMisconf
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
