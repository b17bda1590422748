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
			got, reasons := Judge(tc.spec, tc.ev)
			require.Equal(t, tc.want, got, "reasons: %s", ReasonsString(reasons))
			require.NotEmpty(t, reasons, "a verdict always carries its reasons")
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
