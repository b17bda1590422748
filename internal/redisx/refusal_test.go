package redisx

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestASampleSaysWhichWritesWereRefusedSinceTheLast reads INFO stats and
// errorstats: a refusal is writes refused to anyone between two samples,
// the first by Refusals' order; a first sample, or counts that went down,
// say none.
func TestASampleSaysWhichWritesWereRefusedSinceTheLast(t *testing.T) {
	t.Parallel()
	info := func(errs ...string) string {
		var b strings.Builder
		b.WriteString("# Stats\r\nevicted_keys:7\r\n\r\n# Errorstats\r\nerrorstat_ERR:count=3\r\n")
		for i := 0; i+1 < len(errs); i += 2 {
			b.WriteString("errorstat_" + errs[i] + ":count=" + errs[i+1] + "\r\n")
		}
		return b.String()
	}
	var none, oneOOM refusalCounts
	oneOOM[liveness.RefusalOOM] = 1
	cases := map[string]struct {
		info   string
		before refusalCounts
		first  bool
		want   liveness.Refusal
	}{
		"no write refused":                              {info(), none, false, liveness.RefusalNone},
		"writes refused OOM since the last sample":      {info("OOM", "4"), oneOOM, false, liveness.RefusalOOM},
		"no more writes refused since":                  {info("OOM", "1"), oneOOM, false, liveness.RefusalNone},
		"MISCONF":                                       {info("MISCONF", "2"), none, false, liveness.RefusalMisconf},
		"READONLY":                                      {info("READONLY", "1"), none, false, liveness.RefusalReadonly},
		"NOREPLICAS":                                    {info("NOREPLICAS", "9"), none, false, liveness.RefusalNoReplicas},
		"two at once: the first of Refusals":            {info("NOREPLICAS", "9", "MISCONF", "1"), none, false, liveness.RefusalMisconf},
		"a first sample has nothing to compare with":    {info("OOM", "4"), none, true, liveness.RefusalNone},
		"counts reset by a restart or CONFIG RESETSTAT": {info("OOM", "0"), oneOOM, false, liveness.RefusalNone},
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
	require.Equal(t, liveness.RefusalNone, parseSample("# Stats\r\nevicted_keys:0\r\n").refusal(none, true), "without errorstats, only replies tell")
}

func TestARefusalIsToldFromItsErrorPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, liveness.RefusalNone, RefusalOf(errors.New("ERR unknown command")))
	require.Equal(t, liveness.RefusalNone, RefusalOf(nil))
	require.Equal(t, liveness.RefusalOOM, refusalIn("requeue: OOM command not allowed when used memory > 'maxmemory'."))
	require.Equal(t, liveness.RefusalMisconf, refusalIn("dead-letter: MISCONF Redis is configured to save RDB snapshots"))
	require.Equal(t, liveness.RefusalNone, refusalIn("requeue: ERR some other error"))
}
