package liveness_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
)

// TestIssueTableFromRedisValuesToActions runs each row of issue 11's table
// from the values Redis would hold, through Build, to what the scaler
// reports and what hygiene does: consumer "w" holds 6 entries, a live
// consumer "live" (where the group has heartbeats) holds 2.
func TestIssueTableFromRedisValuesToActions(t *testing.T) {
	t.Parallel()
	server := time.Unix(1_800_000_000, 0)
	ms := func(ago time.Duration) string { return strconv.FormatInt(server.Add(-ago).UnixMilli(), 10) }
	owner, err := liveness.ParseOwnerMatch("prefix")
	require.NoError(t, err)
	spec := liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{owner}", HeartbeatMaxAge: 2 * time.Second, StartGrace: 2 * time.Second, GhostIdle: time.Minute, Owner: owner}
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: time.Second}
	const w, live = "agent-a-rig-agent-runtime-0", "agent-b-rig-agent-runtime-0"
	liveBeat := map[string]string{"hb:agent-b": ms(100 * time.Millisecond)}
	cases := map[string]struct {
		beats map[string]string // heartbeat keys that exist, with their values
		known time.Duration     // how long pelwarden has known "w"
		want  liveness.Verdict
		// metric is pendingEntriesCount; taken says whether the scan
		// gives back w's entries past entryStaleSeconds (and only those).
		metric   int64
		taken    bool
		guard    bool
		inFuture int
	}{
		"reads every second, owner heartbeat stale for an hour: not Alive, stale entries requeued, left out of the metric": {
			beats: map[string]string{"hb:agent-a": ms(time.Hour)}, known: time.Hour,
			want: liveness.Ghost, metric: 2, taken: true,
		},
		"new consumer, reads, no heartbeat yet, known for less than the grace: Alive (starting)": {
			beats: map[string]string{}, known: time.Second,
			want: liveness.Alive, metric: 8, taken: false,
		},
		"same consumer, still no heartbeat after the grace: Ghost, once its entries are stale": {
			beats: map[string]string{}, known: 3 * time.Second,
			want: liveness.Ghost, metric: 2, taken: true,
		},
		"no consumer of the group has any heartbeat key: Unknown for all, no action": {
			beats: nil, known: time.Hour,
			want: liveness.Unknown, metric: 8, taken: false, guard: true,
		},
		"heartbeat 1 h in the future: Unknown": {
			beats: map[string]string{"hb:agent-a": ms(-time.Hour)}, known: time.Hour,
			want: liveness.Unknown, metric: 8, taken: false, inFuture: 1,
		},
		"JSON heartbeat, fresh, degraded: entries taken once stale, excluded from the metric": {
			beats: map[string]string{"hb:agent-a": `{"time":` + ms(500*time.Millisecond) + `,"degraded":true,"degradedReasons":["codex_quota_exhausted_until_2026-05-16T12:00:00Z"]}`},
			known: time.Hour, want: liveness.Degraded, metric: 2, taken: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := liveness.Observation{
				ServerTime: server, LagValid: true,
				Consumers: []liveness.ConsumerObs{
					{Name: w, Idle: 300 * time.Millisecond, Inactive: 300 * time.Millisecond},
					{Name: live, Idle: 50 * time.Millisecond, Inactive: 50 * time.Millisecond},
				},
				PendingByConsumer: map[string]int64{w: 6, live: 2},
				Heartbeats:        map[string]liveness.HeartbeatObs{},
			}
			for _, c := range []string{w, live} {
				for _, k := range spec.HeartbeatKeys(c) {
					obs.Heartbeats[k] = liveness.HeartbeatObs{}
				}
			}
			beats := tc.beats
			if beats != nil {
				for k, v := range liveBeat {
					beats[k] = v
				}
			}
			for k, v := range beats {
				obs.Heartbeats[k] = liveness.HeartbeatObs{Exists: true, Value: v}
			}
			target := liveness.Target{GroupRef: liveness.GroupRef{Stream: "assignments", Group: "agents"}, Spec: spec}
			now := time.Now()
			first := liveness.Build(&target, obs, nil, now.Add(-tc.known))
			s := liveness.Build(&target, obs, first, now)

			byName := map[string]liveness.ConsumerView{}
			for _, c := range s.Consumers {
				byName[c.Name] = c
			}
			got := byName[w]
			require.Equal(t, tc.want, got.Verdict, liveness.ReasonsString(got.Reasons))
			require.Equal(t, tc.metric, policy.Value(policy.Pending, s), "pendingEntriesCount")
			require.Equal(t, tc.guard, s.NoHeartbeatRecords, "the misconfiguration guard, behind its metric and finding")
			require.Equal(t, tc.inFuture, s.FutureHeartbeats, "heartbeats from the future, behind their finding")
			if tc.guard {
				require.Equal(t, liveness.Unknown, byName[live].Verdict, "Unknown for all")
			} else {
				require.Equal(t, liveness.Alive, byName[live].Verdict, "the live owner stays Alive")
			}
			// What the hygiene scan does with each consumer: the engine's
			// own decision over this snapshot.
			steps := map[string]reclaim.Step{}
			for _, st := range reclaim.Decide(s, h, now) {
				steps[st.Owner.Name] = st
			}
			if tc.taken {
				require.Equal(t, reclaim.Requeue, steps[w].Action, steps[w].Reason)
				require.Equal(t, h.EntryStale, steps[w].MinIdle, "only entries past entryStaleSeconds are taken")
			} else {
				require.Equal(t, reclaim.None, steps[w].Action, "no action: %s", steps[w].Reason)
			}
			require.Equal(t, reclaim.None, steps[live].Action, "a live owner's entries are never taken: %s", steps[live].Reason)
		})
	}
}
