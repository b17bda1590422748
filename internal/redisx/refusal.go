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
	refusal liveness.Refusal
	// evicted is evicted_keys; evictKnown says INFO stats gave it.
	evicted    int64
	evictKnown bool
	// mayEvict says maxmemory is set and maxmemory-policy may evict
	// keys (allkeys-*, volatile-*).
	mayEvict bool
}

// writeConfig lists the settings a sample asks CONFIG GET for: what INFO
// does not say of when writes are refused.
var writeConfig = []any{"CONFIG", "GET", "min-replicas-to-write", "stop-writes-on-bgsave-error", "save", "replica-read-only"}

// infoSections are the INFO sections a sample reads (several at once:
// Redis 7.0 and later).
var infoSections = []string{"memory", "persistence", "replication", "stats"}

// parseSample reads a node's INFO memory, persistence, replication and
// stats, and its writeConfig (nil where CONFIG GET was refused), as Redis
// decides whether to refuse a write: a setting CONFIG did not give is
// taken to refuse where INFO alone cannot rule it out.
func parseSample(info string, cfg map[string]string) sample {
	f := func(k string) string { return infoField(info, k) }
	n := func(k string) int64 { v, _ := strconv.ParseInt(f(k), 10, 64); return v }
	// maybe says setting k refuses as value does, or CONFIG did not say.
	maybe := func(k, value string) bool {
		v, ok := cfg[k]
		return !ok || v == value
	}
	s := sample{}
	if v := f("evicted_keys"); v != "" {
		s.evicted, s.evictKnown = n("evicted_keys"), true
	}
	policy := f("maxmemory_policy")
	s.mayEvict = n("maxmemory") > 0 && (strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-"))
	_, hasSave := cfg["save"]
	switch {
	case f("role") == "slave" && maybe("replica-read-only", "yes"):
		s.refusal = liveness.RefusalReadonly
	case f("rdb_last_bgsave_status") == "err" && maybe("stop-writes-on-bgsave-error", "yes") && (!hasSave || cfg["save"] != ""),
		f("aof_enabled") == "1" && f("aof_last_write_status") == "err":
		s.refusal = liveness.RefusalMisconf
	case noReplicas(f("min_slaves_good_slaves"), cfg["min-replicas-to-write"]):
		s.refusal = liveness.RefusalNoReplicas
	case n("maxmemory") > 0 && policy == "noeviction" && n("used_memory")-n("mem_not_counted_for_evict") > n("maxmemory"):
		s.refusal = liveness.RefusalOOM
	}
	return s
}

// noReplicas says writes are refused for want of replicas in sync: INFO
// gives min_slaves_good_slaves only where min-replicas-to-write is set
// (at least 1), so with none good they are; otherwise CONFIG's value
// decides, and without it only a refused write tells.
func noReplicas(good, least string) bool {
	if good == "" {
		return false
	}
	g, err := strconv.Atoi(good)
	if err != nil {
		return false
	}
	if m, err := strconv.Atoi(least); err == nil {
		return g < m
	}
	return g == 0
}

// configMap reads CONFIG GET's reply, a map (RESP3) or a flat list of
// names and values (RESP2).
func configMap(reply any) map[string]string {
	out := map[string]string{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			ks, _ := k.(string)
			vs, _ := v.(string)
			out[ks] = vs
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			ks, _ := r[i].(string)
			vs, _ := r[i+1].(string)
			out[ks] = vs
		}
	}
	return out
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
