package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEvidenceAgedDuringAnOutageIsNotEvidence covers invariant 10's first
// half, rule by rule: while the node holding the evidence has been
// readable for less than its threshold, stale or missing evidence is
// Unknown; fresh evidence, and a pod seen to go, still decide.
func TestEvidenceAgedDuringAnOutageIsNotEvidence(t *testing.T) {
	t.Parallel()
	withPods := heartbeatSpec()
	withPods.Kubernetes = true
	stale := Heartbeat{State: HeartbeatStale, Age: time.Minute, Key: "hb:w"}
	cases := map[string]struct {
		spec   Spec
		ev     Evidence
		want   Verdict
		reason string
	}{
		"stale heartbeat, node readable again for less than the max age: Unknown, naming the outage": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Minute, Inactive: -1, Known: time.Hour, Heartbeat: with(stale, 2*time.Second)},
			want: Unknown, reason: "readable again only since an outage",
		},
		"stale heartbeat, node readable for a whole max age: Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Minute, Inactive: -1, Known: time.Hour, Heartbeat: stale},
			want: Ghost, reason: "older than max age",
		},
		"missing heartbeat after a restart that lost it: Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Minute, Inactive: -1, Known: time.Hour, Heartbeat: Heartbeat{State: HeartbeatMissing, Key: "hb:w", Recovering: time.Second}},
			want: Unknown, reason: "evidence past heartbeatMaxAge 5s counts once the node has been readable that long, in 1s",
		},
		"fresh heartbeat during the recovery: Alive": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Minute, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second, Recovering: time.Second}},
			want: Alive,
		},
		"pod seen to go during the recovery: Ghost (corroborated)": {
			spec: withPods,
			ev: Evidence{Listed: true, Seen: time.Minute, Inactive: -1, Known: time.Hour, Heartbeat: with(stale, time.Second),
				Pod: Pod{State: PodGone, GoneFor: time.Minute, NameUnique: true}},
			want: Ghost,
		},
		"idle past ghostIdle, stream's node readable again for less than ghostIdle: Unknown": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 2 * time.Minute, Inactive: -1, IdleRecovering: 30 * time.Second},
			want: Unknown, reason: "evidence past ghostIdle 1m0s counts",
		},
		"idle past ghostIdle, stream's node readable for longer: Ghost": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 2 * time.Minute, Inactive: -1},
			want: Ghost,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := Judge(tc.spec, tc.ev)
			require.Equal(t, tc.want, j.Verdict, ReasonsString(j.Reasons))
			require.Contains(t, ReasonsString(j.Reasons), tc.reason)
		})
	}
}

func with(hb Heartbeat, recovering time.Duration) Heartbeat {
	hb.Recovering = recovering
	return hb
}

// TestBuildMeasuresTheRecoveryFromWhenTheNodeWasReadableAgain: the
// fetcher says since when each key's node (and the stream's) has been
// readable; Build turns it into the time left, per key.
func TestBuildMeasuresTheRecoveryFromWhenTheNodeWasReadableAgain(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	target := &Target{Spec: heartbeatSpec()}
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers:         []ConsumerObs{{Name: "a", Idle: time.Hour, Inactive: -1}, {Name: "b", Idle: time.Hour, Inactive: -1}, {Name: "c", Idle: time.Hour, Inactive: -1}},
		PendingByConsumer: map[string]int64{"a": 1, "b": 2, "c": 4},
		Heartbeats: map[string]HeartbeatObs{
			"hb:a": withSince(beat(time.Hour), now.Add(-2*time.Second)), // its node came back 2s ago
			"hb:b": withSince(beat(time.Hour), now.Add(-6*time.Second)), // 6s ago: past the 5s max age
			"hb:c": beat(time.Hour),                                     // not followed
		},
	}
	s := Build(target, obs, nil, now)
	require.Equal(t, []Verdict{Unknown, Ghost, Ghost}, []Verdict{s.Consumers[0].Verdict, s.Consumers[1].Verdict, s.Consumers[2].Verdict})
	require.Equal(t, int64(1), s.LivePending, "the window is never read as 0: the outage's Unknown counts as live")
	require.Contains(t, ReasonsString(s.Consumers[0].Reasons), "in 3s; readable for (2s)")

	idle := &Target{Spec: idleSpec()}
	obs.StreamReadableSince = now.Add(-10 * time.Second)
	s = Build(idle, obs, nil, now)
	require.Len(t, s.Consumers, 3)
	require.Zero(t, s.GhostConsumers, "an hour idle, but the stream's node is readable again for 10s only")
}

func withSince(h HeartbeatObs, since time.Time) HeartbeatObs {
	n := h.Health()
	n.ReadableSince = since
	h.Node = &n
	return h
}
