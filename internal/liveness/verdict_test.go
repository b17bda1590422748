package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func idleSpec() Spec {
	return Spec{Idle: true, GhostIdle: 60 * time.Second, Owner: OwnerMatch{mode: "exact"}}
}

func heartbeatSpec() Spec {
	return Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: 5 * time.Second, StartGrace: 5 * time.Second,
		GhostIdle: 60 * time.Second, Owner: OwnerMatch{mode: "exact"}}
}

// TestJudgeFollowsTheLivenessTable covers every row of the design's liveness
// table that concerns the idle and heartbeat sources, and the rows of issue
// 11: the heartbeat outranks a reading name, a starting worker has a
// grace, and a group without any heartbeat record is not judged by it.
func TestJudgeFollowsTheLivenessTable(t *testing.T) {
	t.Parallel()
	both := heartbeatSpec()
	both.Idle = true
	stale := func(age time.Duration) Heartbeat { return Heartbeat{State: HeartbeatStale, Age: age, Key: "hb:w"} }
	missing := Heartbeat{State: HeartbeatMissing, Key: "hb:w"}
	cases := map[string]struct {
		spec Spec
		ev   Evidence
		want Verdict
		// reason is a part of some reason that must say why.
		reason string
	}{
		"only idle configured, idle past ghostIdleSeconds is Ghost": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1},
			want: Ghost, reason: "past ghostIdle",
		},
		"only idle configured, idle below ghostIdleSeconds is Alive": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 59 * time.Second, Inactive: -1},
			want: Alive,
		},
		"heartbeat stale past its max age (hung worker) is Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 30 * time.Second, Inactive: -1, Known: time.Hour, Heartbeat: stale(6 * time.Second)},
			want: Ghost, reason: "older than max age",
		},
		"fresh heartbeat with an entry idle ten times the stale threshold is Alive (long job)": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second}},
			want: Alive, reason: "fresh heartbeat",
		},
		"heartbeat read fails is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatError, Err: "WRONGTYPE"}},
			want: Unknown, reason: "WRONGTYPE",
		},
		"heartbeat read fails while the name is read from is still Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 100 * time.Millisecond, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatError, Err: "WRONGTYPE"}},
			want: Unknown,
		},
		"heartbeat not read yet is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1},
			want: Unknown, reason: "not read yet",
		},
		"reads every second while the owner's heartbeat is stale for an hour is not Alive": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 300 * time.Millisecond, Inactive: 300 * time.Millisecond, Known: time.Hour, Heartbeat: stale(time.Hour)},
			want: Ghost, reason: "older than max age",
		},
		"a stale heartbeat outranks a read even while pelwarden has just met the consumer": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 300 * time.Millisecond, Inactive: -1, Known: 0, Heartbeat: stale(time.Hour)},
			want: Ghost,
		},
		"new consumer that reads, no heartbeat yet, known for less than the grace is Alive (starting)": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Known: 4 * time.Second, Heartbeat: missing},
			want: Alive, reason: "a starting worker",
		},
		"the same consumer still without a heartbeat after the grace is Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Known: 6 * time.Second, Heartbeat: missing},
			want: Ghost, reason: "no heartbeat past the start grace",
		},
		"a missing heartbeat of a consumer not read within the grace is Ghost at once": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 10 * time.Second, Inactive: -1, Known: 0, Heartbeat: missing},
			want: Ghost,
		},
		"a start grace of 0 gives no grace": {
			spec: func() Spec { s := heartbeatSpec(); s.StartGrace = 0; return s }(),
			ev:   Evidence{Listed: true, Seen: 0, Inactive: -1, Known: 0, Heartbeat: missing},
			want: Ghost,
		},
		"no consumer of the group has any heartbeat key (pattern probably wrong) is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Hour, Inactive: -1, Known: time.Hour, Heartbeat: missing, NoGroupHeartbeats: true},
			want: Unknown, reason: "pattern is probably wrong",
		},
		"a heartbeat an hour in the future is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Hour, Inactive: -1, Known: time.Hour, Heartbeat: Heartbeat{State: HeartbeatFuture, Key: "hb:w"}},
			want: Unknown, reason: "dated more than the 5s tolerance ahead of Redis's clock",
		},
		"a fresh heartbeat that says degraded is Degraded": {
			spec: heartbeatSpec(),
			ev: Evidence{Listed: true, Seen: 100 * time.Millisecond, Inactive: -1, Known: time.Hour,
				Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second, Key: "hb:w", Degraded: true, DegradedReasons: []string{"codex_quota_exhausted_until_2026-05-16T12:00:00Z"}}},
			want: Degraded, reason: "says degraded (codex_quota_exhausted_until_2026-05-16T12:00:00Z)",
		},
		"a stale heartbeat that said degraded is Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Hour, Inactive: -1, Known: time.Hour, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour, Degraded: true}},
			want: Ghost,
		},
		"idle and heartbeat: a stale heartbeat outranks a read within ghostIdle": {
			spec: both,
			ev:   Evidence{Listed: true, Seen: 30 * time.Second, Inactive: -1, Known: time.Hour, Heartbeat: stale(time.Minute)},
			want: Ghost,
		},
		"idle and heartbeat: stale heartbeat and idle past ghostIdle is Ghost": {
			spec: both,
			ev:   Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, Known: time.Hour, Heartbeat: stale(time.Minute)},
			want: Ghost,
		},
		"a consumer only in the pending summary is Unknown": {
			spec: idleSpec(),
			ev:   Evidence{Listed: false, Seen: time.Hour},
			want: Unknown, reason: "not in XINFO CONSUMERS",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := Judge(tc.spec, tc.ev)
			all := ReasonsString(j.Reasons)
			require.Equal(t, tc.want, j.Verdict, "reasons: %s", all)
			require.NotEmpty(t, j.Reasons, "a verdict always carries its reasons")
			require.Contains(t, all, tc.reason)
		})
	}
}

func kubeSpec(heartbeat bool) Spec {
	s := Spec{Kubernetes: true, PodNamespace: "jobs", PodSelector: "app=worker", PodGrace: 2 * time.Second,
		GhostIdle: 60 * time.Second, Owner: OwnerMatch{mode: "exact"}}
	if heartbeat {
		s.Heartbeat, s.HeartbeatKey, s.HeartbeatMaxAge = true, "hb:{consumer}", 5*time.Second
	}
	return s
}

// TestJudgeFollowsTheLivenessTableForPods covers every row of the design's
// liveness table that involves pods.
func TestJudgeFollowsTheLivenessTableForPods(t *testing.T) {
	t.Parallel()
	gone := func(ago time.Duration) Pod { return Pod{State: PodGone, Name: "w-1", GoneFor: ago} }
	replicaSetGone := func(ago time.Duration) Pod { p := gone(ago); p.NameUnique = true; return p }
	running := Pod{State: PodRunning, Name: "w-1"}
	fresh := Heartbeat{State: HeartbeatFresh, Age: time.Second}
	cases := map[string]struct {
		spec       Spec
		ev         Evidence
		want       Verdict
		wantShared bool
	}{
		"pod deleted, consumer idle and growing, past the grace is Ghost": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 4 * time.Second, Inactive: -1, Pod: gone(3 * time.Second)},
			want: Ghost,
		},
		"pod deleted, within the grace is not yet Ghost": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 2 * time.Second, Inactive: -1, Pod: gone(time.Second)},
			want: Alive,
		},
		"a ReplicaSet's pod deleted a moment ago is Ghost at once: its name never comes back": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 2 * time.Second, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond)},
			want: Ghost,
		},
		"a ReplicaSet's pod deleted but its name still read from is a shared name, not Ghost": {
			spec:       kubeSpec(false),
			ev:         Evidence{Listed: true, Seen: 5 * time.Millisecond, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond)},
			want:       Alive,
			wantShared: true,
		},
		"a read that looks newer than the departure only because the judgement came late is Ghost": {
			// Read 5ms before Redis answered, which was 20ms ago: 25ms
			// ago, before the pod went 10ms ago.
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 5 * time.Millisecond, ReadLag: 20 * time.Millisecond, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond)},
			want: Ghost,
		},
		"a heartbeat that looks newer than the departure only because the judgement came late is Ghost": {
			spec: kubeSpec(true),
			ev: Evidence{Listed: true, Seen: time.Second, ReadLag: 20 * time.Millisecond, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond),
				Heartbeat: Heartbeat{State: HeartbeatFresh, Age: 5 * time.Millisecond}},
			want: Ghost,
		},
		"a read after the departure, counted as of Redis's answer, is still a shared name": {
			spec:       kubeSpec(false),
			ev:         Evidence{Listed: true, Seen: 5 * time.Millisecond, ReadLag: 3 * time.Millisecond, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond)},
			want:       Alive,
			wantShared: true,
		},
		"a ReplicaSet's pod deleted with its heartbeat unreadable is Unknown, grace or none": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 2 * time.Second, Inactive: -1, Pod: replicaSetGone(10 * time.Millisecond), Heartbeat: Heartbeat{State: HeartbeatError}},
			want: Unknown,
		},
		"pod deleted with a heartbeat written before it went is Ghost without waiting for the max age": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 4 * time.Second, Inactive: -1, Pod: gone(3 * time.Second), Heartbeat: Heartbeat{State: HeartbeatFresh, Age: 3500 * time.Millisecond}},
			want: Ghost,
		},
		"pod deleted but the name is still read from is a shared name, not Ghost": {
			spec:       kubeSpec(false),
			ev:         Evidence{Listed: true, Seen: 100 * time.Millisecond, Inactive: -1, Pod: gone(10 * time.Second)},
			want:       Alive,
			wantShared: true,
		},
		"pod deleted but its heartbeat is still written is a shared name, not Ghost": {
			spec:       kubeSpec(true),
			ev:         Evidence{Listed: true, Seen: 20 * time.Second, Inactive: -1, Pod: gone(10 * time.Second), Heartbeat: fresh},
			want:       Alive,
			wantShared: true,
		},
		"pod deleted and the heartbeat unreadable is Unknown": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 20 * time.Second, Inactive: -1, Pod: gone(10 * time.Second), Heartbeat: Heartbeat{State: HeartbeatError}},
			want: Unknown,
		},
		"pod exists, heartbeat stale past its max age (hung worker) is Ghost": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 30 * time.Second, Inactive: -1, Pod: running, Heartbeat: Heartbeat{State: HeartbeatStale, Age: 6 * time.Second}},
			want: Ghost,
		},
		"pod exists and still reads every second, heartbeat stale for an hour is Ghost": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Pod: running, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour}},
			want: Ghost,
		},
		"pod exists with a degraded heartbeat is Degraded": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Pod: running, Heartbeat: Heartbeat{State: HeartbeatFresh, Degraded: true}},
			want: Degraded,
		},
		"pod deleted but a degraded heartbeat is still written is a shared name, Degraded": {
			spec:       kubeSpec(true),
			ev:         Evidence{Listed: true, Seen: 20 * time.Second, Inactive: -1, Pod: gone(10 * time.Second), Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second, Degraded: true}},
			want:       Degraded,
			wantShared: true,
		},
		"pod deleted and the heartbeat dated in the future is Unknown": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 20 * time.Second, Inactive: -1, Pod: gone(10 * time.Second), Heartbeat: Heartbeat{State: HeartbeatFuture}},
			want: Unknown,
		},
		"pod deleted in a group without heartbeat records is still Ghost: the pod is evidence of its own": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 20 * time.Second, Inactive: -1, Pod: gone(10 * time.Second), Heartbeat: Heartbeat{State: HeartbeatMissing}, NoGroupHeartbeats: true},
			want: Ghost,
		},
		"pod exists, heartbeat fresh, entry idle ten times the stale threshold is Alive (long job)": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 300 * time.Second, Inactive: -1, Pod: running, Heartbeat: fresh},
			want: Alive,
		},
		"pod exists and the consumer idle past ghostIdle is Alive without heartbeats (long job)": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Pod: running},
			want: Alive,
		},
		"Kubernetes API unreachable or informer not synced is Unknown": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Pod: Pod{Err: "informer not synced"}},
			want: Unknown,
		},
		"informer not synced with a stale heartbeat is Unknown, not Ghost": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Pod: Pod{Err: "watch failing"}, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour}},
			want: Unknown,
		},
		"container restarted inside the same pod (same name) is Alive": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Pod: Pod{State: PodRunning, Name: "w-1", Restarts: 3}},
			want: Alive,
		},
		"a terminating pod finishing its work is Alive even with a stale heartbeat": {
			spec: kubeSpec(true),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Pod: Pod{State: PodTerminating, Name: "w-1"}, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour}},
			want: Alive,
		},
		"no pod of that name: idle past ghostIdle is Ghost": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, Pod: Pod{State: PodNone}},
			want: Ghost,
		},
		"no pod of that name: idle below ghostIdle is Alive": {
			spec: kubeSpec(false),
			ev:   Evidence{Listed: true, Seen: 59 * time.Second, Inactive: -1, Pod: Pod{State: PodNone}},
			want: Alive,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := Judge(tc.spec, tc.ev)
			require.Equal(t, tc.want, j.Verdict, "reasons: %s", ReasonsString(j.Reasons))
			require.Equal(t, tc.wantShared, j.SharedName, "shared name")
		})
	}
}

func TestVerdictZeroValueIsUnknown(t *testing.T) {
	t.Parallel()
	var v Verdict
	require.Equal(t, Unknown, v)
	require.Equal(t, "Unknown", v.String())
}

func TestPrefixResolverPrefersTheLongestKnownOwner(t *testing.T) {
	t.Parallel()
	m, err := ParseOwnerMatch("prefix")
	require.NoError(t, err)
	known := map[string]bool{"review-e": true, "review-e-codex": true}
	owner, ok := m.Resolve("review-e-codex-0", func(o string) bool { return known[o] })
	require.True(t, ok)
	require.Equal(t, "review-e-codex", owner, "review-e-codex-0 belongs to review-e-codex, not review-e")
	owner, ok = m.Resolve("review-e-claude-1", func(o string) bool { return known[o] })
	require.True(t, ok)
	require.Equal(t, "review-e", owner)
	_, ok = m.Resolve("dev-e-0", func(o string) bool { return known[o] })
	require.False(t, ok)
	require.Equal(t, []string{"a--b_c", "a--b", "a"}, m.Candidates("a--b_c"), "runs of separators cut once")
}

func TestRegexResolverUsesTheOwnerGroup(t *testing.T) {
	t.Parallel()
	m, err := ParseOwnerMatch(`regex:^(?P<owner>[a-z-]+)-rig-agent-runtime-\d+$`)
	require.NoError(t, err)
	owner, ok := m.Resolve("review-e-codex-rig-agent-runtime-0", nil)
	require.True(t, ok)
	require.Equal(t, "review-e-codex", owner)
	_, ok = m.Resolve("something-else", nil)
	require.False(t, ok)
}

func TestParseOwnerMatchRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"longest", "regex:(", "regex:^(?P<name>.*)$", "regex:^(?P<owner>x?)$x"} {
		_, err := ParseOwnerMatch(in)
		if in == "regex:^(?P<owner>x?)$x" {
			require.NoError(t, err, "a valid pattern with an owner group is accepted")
			continue
		}
		require.Error(t, err, "input %q", in)
	}
}
