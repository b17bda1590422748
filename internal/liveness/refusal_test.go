package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBuildHoldsWhatCouldNotBeWrittenUnknown: the fetcher says, per key,
// whether its node refuses writes or accepts them again since when, and
// when it last evicted keys; Build holds a stale or missing heartbeat
// Unknown for a max age (5s) from then, and counts who it holds.
func TestBuildHoldsWhatCouldNotBeWrittenUnknown(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	target := &Target{Spec: heartbeatSpec()}
	refused := func(h HeartbeatObs, r Refusal, since time.Time) HeartbeatObs {
		h.Node = &NodeHealth{Refused: r, WritableSince: since}
		return h
	}
	evicted := func(h HeartbeatObs, at time.Time) HeartbeatObs {
		h.Node = &NodeHealth{EvictedAt: at}
		return h
	}
	obs := Observation{ServerTime: serverNow, LagValid: true, PendingByConsumer: map[string]int64{}, Heartbeats: map[string]HeartbeatObs{
		"hb:a": refused(beat(time.Hour), RefusalOOM, time.Time{}),                  // refused now
		"hb:b": refused(beat(time.Hour), RefusalMisconf, now.Add(-2*time.Second)),  // accepted again 2s ago
		"hb:c": refused(beat(time.Hour), RefusalReadonly, now.Add(-6*time.Second)), // 6s ago: past the max age
		"hb:d": evicted(HeartbeatObs{}, now.Add(-time.Second)),                     // missing; keys evicted 1s ago
		"hb:e": evicted(HeartbeatObs{}, now.Add(-6*time.Second)),                   // missing; 6s ago
		"hb:f": evicted(beat(time.Hour), now.Add(-time.Second)),                    // stale: an eviction does not make a key old
		"hb:g": refused(beat(time.Second), RefusalNoReplicas, time.Time{}),         // fresh while refused: Alive
	}}
	want := map[string]string{"a": "writes-refused", "b": "writes-refused", "c": "heartbeat-stale", "d": "heartbeat-evicted",
		"e": "heartbeat-missing", "f": "heartbeat-stale", "g": "fresh"}
	for _, c := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		obs.Consumers = append(obs.Consumers, ConsumerObs{Name: c, Idle: time.Hour, Inactive: -1})
		obs.PendingByConsumer[c] = 1
	}
	s := Build(target, obs, nil, now)
	for _, cv := range s.Consumers {
		require.Equal(t, want[cv.Name], cv.Rule(), "%s: %s", cv.Name, ReasonsString(cv.Reasons))
	}
	require.Equal(t, RefusalOOM, s.Refused, "a node of the read refuses writes now")
	require.Equal(t, 2, s.RefusedConsumers)
	require.Equal(t, 1, s.EvictedConsumers)
	require.Equal(t, int64(4), s.LivePending, "the held count as live, as g does")
	require.Contains(t, ReasonsString(s.Consumers[0].Reasons), "refuses writes (OOM: used memory is above maxmemory")
	require.Contains(t, ReasonsString(s.Consumers[1].Reasons), "accepts them again")

	stale := NodeHealth{Refused: RefusalOOM, WritableSince: now.Add(-2 * time.Second)}
	d, ok := changeIn(target.Spec, Evidence{Listed: true, Known: time.Hour, Seen: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour, Refused: refusedFor(5*time.Second, stale.Refused, stale.WritableSince, now)}})
	require.True(t, ok)
	require.Equal(t, 3*time.Second, d, "the verdict may change once writes have been accepted a max age")
}

// TestIdleIsHeldUnknownWhileReadsAreRefused: MISCONF, READONLY and
// NOREPLICAS refuse XREADGROUP too, so idle grows on every worker; OOM
// lets reads through.
func TestIdleIsHeldUnknownWhileReadsAreRefused(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	target := &Target{Spec: idleSpec()}
	for _, r := range Refusals {
		obs := Observation{ServerTime: serverNow, LagValid: true, StreamRefused: r,
			Consumers: []ConsumerObs{{Name: "w", Idle: time.Hour, Inactive: -1}}, PendingByConsumer: map[string]int64{"w": 1}}
		s := Build(target, obs, nil, now)
		want := "idle-writes-refused"
		if r == RefusalOOM {
			want = "idle-past"
		}
		require.Equal(t, want, s.Consumers[0].Rule(), "%s: %s", r, ReasonsString(s.Consumers[0].Reasons))
		require.Equal(t, r, s.Refused)
	}
}
