package metadata

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNumbersAreCheckedAfterConversion(t *testing.T) {
	t.Parallel()
	hb := []string{"liveness", "heartbeat,kubernetes", "heartbeatKey", "hb:{consumer}", "podSelector", "app=w"}
	cases := map[string]struct {
		md      map[string]string
		key     string
		mention string
	}{
		"an entry stale time that rounds to zero": {md: base("entryStaleSeconds", "1e-9"), key: "entryStaleSeconds", mention: "from 0.001 (1ms)"},
		"a ghost idle time that rounds to zero":   {md: base("ghostIdleSeconds", "1e-12"), key: "ghostIdleSeconds", mention: "from 0.001 (1ms)"},
		"a ghost idle time under a millisecond":   {md: base("ghostIdleSeconds", "0.0009"), key: "ghostIdleSeconds", mention: "from 0.001"},
		"a heartbeat max age under a millisecond": {md: base(append(hb, "heartbeatMaxAgeSeconds", "1e-5")...), key: "heartbeatMaxAgeSeconds", mention: "from 0.001"},
		"a hard timeout that rounds to zero":      {md: base("hardTimeoutSeconds", "1e-300"), key: "hardTimeoutSeconds", mention: "from 0.001"},
		"a start grace that rounds to zero":       {md: base(append(hb, "heartbeatStartGraceSeconds", "1e-10")...), key: "heartbeatStartGraceSeconds", mention: "0 (a worker"},
		"a pod grace that rounds to zero":         {md: base(append(hb, "podDeletionGraceSeconds", "5e-324")...), key: "podDeletionGraceSeconds", mention: "0 or a number"},
		"a pending target of 1e-300":              {md: base("pendingEntriesCount", "1e-300"), key: "pendingEntriesCount", mention: ">= 1 (entries per replica)"},
		"a lag target under one entry":            {md: base("lagCount", "0.5"), key: "lagCount", mention: ">= 1"},
		"a backlog target under one entry":        {md: base("backlogCount", "0.999"), key: "backlogCount", mention: ">= 1"},
		"a heartbeat key with 145 placeholders": {md: base("liveness", "heartbeat", "ownerMatch", "prefix", "heartbeatKey", strings.Repeat("{owner}", 145)),
			key: "heartbeatKey", mention: "exactly one placeholder"},
		"a heartbeat key with one placeholder twice": {md: base("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}:{consumer}"), key: "heartbeatKey", mention: "once"},
		"a carry field named like the marker":        {md: base("deliveryCountField", "pelwarden-carried"), key: "deliveryCountField", mention: "pelwarden writes itself"},
		"a carry field named like a dead-letter field": {md: base("deliveryCountField", "pelwarden-reason"), key: "deliveryCountField",
			mention: "pelwarden-origin-id"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := maps.Clone(tc.md)
			_, err := Parse(tc.md, testEnv)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.key, me.Key, "error: %v", err)
			require.Contains(t, err.Error(), tc.mention)
			require.Equal(t, in, tc.md, "parsing does not change its input")
		})
	}
}

func TestTheSmallestAcceptedNumbersAreUsable(t *testing.T) {
	t.Parallel()
	r, err := Parse(base("lagCount", "1", "entryStaleSeconds", "0.001", "ghostIdleSeconds", "0.0015",
		"liveness", "idle,heartbeat", "heartbeatKey", "hb:{owner}", "heartbeatStartGraceSeconds", "0"), testEnv)
	require.NoError(t, err)
	require.InDelta(t, 1, r.TargetValue, 0)
	require.Equal(t, MinDuration, r.Hygiene.EntryStale)
	require.Equal(t, int64(1), r.Target.Spec.GhostIdle.Milliseconds(), "1.5 ms reaches Redis as 1 ms, never 0")
	require.Zero(t, r.Target.Spec.StartGrace, "a grace of exactly 0 keeps its meaning")
}
