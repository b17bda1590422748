package redisx

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestASampleRefusesAsRedisWould reads INFO as Redis decides to refuse a
// write: a state that refuses writes for certain, or, between two
// samples, writes refused to anyone (errorstats); a failed save refuses
// writes only under settings INFO does not show, so it counts only on a
// first sample, with no counts to compare.
func TestASampleRefusesAsRedisWould(t *testing.T) {
	t.Parallel()
	info := func(kv ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			b.WriteString(kv[i] + ":" + kv[i+1] + "\r\n")
		}
		return b.String() + "# Errorstats\r\n"
	}
	healthy := []string{"used_memory", "900", "maxmemory", "1000", "maxmemory_policy", "noeviction", "mem_not_counted_for_evict", "0",
		"rdb_last_bgsave_status", "ok", "aof_enabled", "0", "aof_last_write_status", "ok", "role", "master", "evicted_keys", "7",
		"errorstat_ERR", "count=3"}
	with := func(kv ...string) string { return info(append(append([]string(nil), kv...), healthy...)...) }
	var none refusalCounts
	oneOOM, oneMisconf := none, none
	oneOOM[liveness.RefusalOOM], oneMisconf[liveness.RefusalMisconf] = 1, 1
	cases := map[string]struct {
		info   string
		before refusalCounts
		first  bool
		want   liveness.Refusal
	}{
		"a healthy master":                                      {info(healthy...), none, false, liveness.RefusalNone},
		"used memory past maxmemory with noeviction":            {with("used_memory", "1001"), none, false, liveness.RefusalOOM},
		"memory not counted for eviction is left out":           {with("used_memory", "1001", "mem_not_counted_for_evict", "2"), none, false, liveness.RefusalNone},
		"past maxmemory with a policy that may evict":           {with("used_memory", "1001", "maxmemory_policy", "allkeys-lru"), none, false, liveness.RefusalNone},
		"writes refused OOM since the last sample":              {with("errorstat_OOM", "count=4"), oneOOM, false, liveness.RefusalOOM},
		"no more writes refused since the last sample":          {with("errorstat_OOM", "count=1"), oneOOM, false, liveness.RefusalNone},
		"a failed save, writes refused since":                   {with("rdb_last_bgsave_status", "err", "errorstat_MISCONF", "count=2"), oneMisconf, false, liveness.RefusalMisconf},
		"a failed save, no write refused since":                 {with("rdb_last_bgsave_status", "err", "errorstat_MISCONF", "count=1"), oneMisconf, false, liveness.RefusalNone},
		"a failed save on a first sample":                       {with("rdb_last_bgsave_status", "err"), none, true, liveness.RefusalMisconf},
		"a failed AOF write on a first sample":                  {with("aof_enabled", "1", "aof_last_write_status", "err"), none, true, liveness.RefusalMisconf},
		"a replica":                                             {with("role", "slave"), none, false, liveness.RefusalReadonly},
		"min-replicas-to-write with no replica in sync":         {with("min_slaves_good_slaves", "0"), none, false, liveness.RefusalNoReplicas},
		"min-replicas-to-write with one in sync: a write tells": {with("min_slaves_good_slaves", "1", "errorstat_NOREPLICAS", "count=9"), none, false, liveness.RefusalNoReplicas},
		"counts reset by a restart or CONFIG RESETSTAT":         {with("errorstat_OOM", "count=0"), oneOOM, false, liveness.RefusalNone},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := parseSample(tc.info)
			require.Equal(t, tc.want, s.refusal(tc.before, !tc.first))
			require.True(t, s.evictKnown)
			require.Equal(t, int64(7), s.evicted)
		})
	}
	require.True(t, parseSample(with("maxmemory_policy", "volatile-ttl")).mayEvict)
	require.False(t, parseSample(with("maxmemory_policy", "volatile-ttl", "maxmemory", "0")).mayEvict, "no limit, no eviction")
	require.False(t, parseSample(info(healthy...)).mayEvict)
	require.Equal(t, liveness.RefusalNone, parseSample("role:master\r\n").refusal(oneOOM, true), "without errorstats, only the state tells")
}

func TestARefusalIsToldFromItsErrorPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, liveness.RefusalNone, RefusalOf(errors.New("ERR unknown command")))
	require.Equal(t, liveness.RefusalNone, RefusalOf(nil))
	require.Equal(t, liveness.RefusalOOM, refusalIn("requeue: OOM command not allowed when used memory > 'maxmemory'."))
	require.Equal(t, liveness.RefusalMisconf, refusalIn("dead-letter: MISCONF Redis is configured to save RDB snapshots"))
	require.Equal(t, liveness.RefusalNone, refusalIn("requeue: ERR some other error"))
}
