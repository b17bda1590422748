package redisx

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestASampleRefusesAsRedisWould reads INFO and CONFIG as Redis decides
// to refuse a write; a setting CONFIG did not give (CONFIG refused by an
// ACL, or renamed) counts as refusing where INFO cannot rule it out.
func TestASampleRefusesAsRedisWould(t *testing.T) {
	t.Parallel()
	info := func(kv ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			b.WriteString(kv[i] + ":" + kv[i+1] + "\r\n")
		}
		return b.String()
	}
	healthy := []string{"used_memory", "900", "maxmemory", "1000", "maxmemory_policy", "noeviction", "mem_not_counted_for_evict", "0",
		"rdb_last_bgsave_status", "ok", "aof_enabled", "0", "aof_last_write_status", "ok", "role", "master", "evicted_keys", "7"}
	with := func(kv ...string) string { return info(append(append([]string(nil), kv...), healthy...)...) }
	cfg := map[string]string{"min-replicas-to-write": "0", "stop-writes-on-bgsave-error": "yes", "save": "3600 1", "replica-read-only": "yes"}
	set := func(k, v string) map[string]string {
		out := map[string]string{}
		for kk, vv := range cfg {
			out[kk] = vv
		}
		out[k] = v
		return out
	}
	cases := map[string]struct {
		info string
		cfg  map[string]string
		want liveness.Refusal
	}{
		"a healthy master":                                {info(healthy...), cfg, liveness.RefusalNone},
		"used memory past maxmemory with noeviction":      {with("used_memory", "1001"), cfg, liveness.RefusalOOM},
		"memory not counted for eviction is left out":     {with("used_memory", "1001", "mem_not_counted_for_evict", "2"), cfg, liveness.RefusalNone},
		"past maxmemory with a policy that may evict":     {with("used_memory", "1001", "maxmemory_policy", "allkeys-lru"), cfg, liveness.RefusalNone},
		"a failed RDB save with stop-writes":              {with("rdb_last_bgsave_status", "err"), cfg, liveness.RefusalMisconf},
		"a failed RDB save without stop-writes":           {with("rdb_last_bgsave_status", "err"), set("stop-writes-on-bgsave-error", "no"), liveness.RefusalNone},
		"a failed RDB save with no save points":           {with("rdb_last_bgsave_status", "err"), set("save", ""), liveness.RefusalNone},
		"a failed RDB save, CONFIG refused":               {with("rdb_last_bgsave_status", "err"), nil, liveness.RefusalMisconf},
		"a failed AOF write":                              {with("aof_enabled", "1", "aof_last_write_status", "err"), cfg, liveness.RefusalMisconf},
		"a replica":                                       {with("role", "slave"), cfg, liveness.RefusalReadonly},
		"a writable replica":                              {with("role", "slave"), set("replica-read-only", "no"), liveness.RefusalNone},
		"fewer good replicas than min-replicas":           {with("min_slaves_good_slaves", "1"), set("min-replicas-to-write", "2"), liveness.RefusalNoReplicas},
		"enough good replicas":                            {with("min_slaves_good_slaves", "2"), set("min-replicas-to-write", "2"), liveness.RefusalNone},
		"no good replica, CONFIG refused":                 {with("min_slaves_good_slaves", "0"), nil, liveness.RefusalNoReplicas},
		"one good replica, CONFIG refused: a write tells": {with("min_slaves_good_slaves", "1"), nil, liveness.RefusalNone},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := parseSample(tc.info, tc.cfg)
			require.Equal(t, tc.want, s.refusal)
			require.True(t, s.evictKnown)
			require.Equal(t, int64(7), s.evicted)
		})
	}
	require.True(t, parseSample(with("maxmemory_policy", "volatile-ttl"), cfg).mayEvict)
	require.False(t, parseSample(with("maxmemory_policy", "volatile-ttl", "maxmemory", "0"), cfg).mayEvict, "no limit, no eviction")
	require.False(t, parseSample(info(healthy...), cfg).mayEvict)
}

func TestARefusalIsToldFromItsErrorPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, liveness.RefusalNone, RefusalOf(errors.New("ERR unknown command")))
	require.Equal(t, liveness.RefusalNone, RefusalOf(nil))
	require.Equal(t, liveness.RefusalOOM, refusalIn("requeue: OOM command not allowed when used memory > 'maxmemory'."))
	require.Equal(t, liveness.RefusalMisconf, refusalIn("dead-letter: MISCONF Redis is configured to save RDB snapshots"))
	require.Equal(t, liveness.RefusalNone, refusalIn("requeue: ERR some other error"))
}
