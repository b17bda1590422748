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
	return Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: 5 * time.Second, GhostIdle: 60 * time.Second, Owner: OwnerMatch{mode: "exact"}}
}

// TestJudgeFollowsTheLivenessTable covers every row of the design's liveness
// table that concerns the idle and heartbeat sources.
func TestJudgeFollowsTheLivenessTable(t *testing.T) {
	t.Parallel()
	both := heartbeatSpec()
	both.Idle = true
	cases := map[string]struct {
		spec Spec
		ev   Evidence
		want Verdict
	}{
		"only idle configured, idle past ghostIdleSeconds is Ghost": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1},
			want: Ghost,
		},
		"only idle configured, idle below ghostIdleSeconds is Alive": {
			spec: idleSpec(),
			ev:   Evidence{Listed: true, Seen: 59 * time.Second, Inactive: -1},
			want: Alive,
		},
		"heartbeat stale past its max age (hung worker) is Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 30 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatStale, Age: 6 * time.Second}},
			want: Ghost,
		},
		"fresh heartbeat with an entry idle ten times the stale threshold is Alive (long job)": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second}},
			want: Alive,
		},
		"heartbeat read fails is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatError, Err: "WRONGTYPE"}},
			want: Unknown,
		},
		"heartbeat not read yet is Unknown": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 600 * time.Second, Inactive: -1},
			want: Unknown,
		},
		"missing heartbeat key with no recent read is Ghost": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: 10 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatMissing}},
			want: Ghost,
		},
		"missing heartbeat but the name is being read from is Alive (worker without heartbeats yet)": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatMissing}},
			want: Alive,
		},
		"heartbeat read fails but the name is being read from is Alive": {
			spec: heartbeatSpec(),
			ev:   Evidence{Listed: true, Seen: time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatError}},
			want: Alive,
		},
		"idle and heartbeat: stale heartbeat but read within ghostIdle is Alive": {
			spec: both,
			ev:   Evidence{Listed: true, Seen: 30 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Minute}},
			want: Alive,
		},
		"idle and heartbeat: stale heartbeat and idle past ghostIdle is Ghost": {
			spec: both,
			ev:   Evidence{Listed: true, Seen: 61 * time.Second, Inactive: -1, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Minute}},
			want: Ghost,
		},
		"a consumer only in the pending summary is Unknown": {
			spec: idleSpec(),
			ev:   Evidence{Listed: false, Seen: time.Hour},
			want: Unknown,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := Judge(tc.spec, tc.ev)
			require.Equal(t, tc.want, j.Verdict, "reasons: %s", ReasonsString(j.Reasons))
			require.NotEmpty(t, j.Reasons, "a verdict always carries its reasons")
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

func TestParseHeartbeatAcceptsSecondsAndMilliseconds(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		"seconds":               {in: "1700000000", want: time.Unix(1700000000, 0)},
		"fractional seconds":    {in: "1700000000.5", want: time.Unix(1700000000, 5e8)},
		"milliseconds":          {in: "1700000000123", want: time.UnixMilli(1700000000123)},
		"surrounding space":     {in: " 1700000000 ", want: time.Unix(1700000000, 0)},
		"not a number":          {in: "alive", wantErr: true},
		"negative":              {in: "-5", wantErr: true},
		"zero":                  {in: "0", wantErr: true},
		"beyond milliseconds":   {in: "1e18", wantErr: true},
		"not a finite number":   {in: "NaN", wantErr: true},
		"infinite is not alive": {in: "+Inf", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHeartbeat(tc.in)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.True(t, tc.want.Equal(got), "want %v, got %v", tc.want, got)
		})
	}
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
