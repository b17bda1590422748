package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func TestStatusExitsOneAndShowsTheNumbersAgeWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	canned, addr := startCanned(t)
	canned.setRedisDown(true)
	for _, output := range []string{"table", "wide", "json", "yaml"} {
		r := runAdmin(t, nil, "status", "--server", addr, "-o", output)
		require.Equal(t, exitFailure, r.code, "-o %s: a failed read is a failure", output)
		require.Contains(t, r.stderr, "the latest read of 1 target(s) failed, so their numbers are stale: default/jobs/workers")
		if output == "table" || output == "wide" {
			require.Contains(t, r.stdout, "default/jobs/workers  lag 7  pending 12 live, 40 held by ghosts, 5 by degraded workers (2 unknown)  STALE: last good read 42s ago\n")
			require.Contains(t, r.stdout, "  last read failed: dial tcp 10.0.0.7:6379: connect: connection refused\n")
		}
	}
	canned.setRedisDown(false)
	r := runAdmin(t, nil, "status", "--server", addr)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "(2 unknown)  read 850ms ago\n")
}

func TestStatusShowsEveryReasonWhole(t *testing.T) {
	t.Parallel()
	_, addr := startCanned(t)
	for _, output := range []string{"table", "wide"} {
		r := runAdmin(t, nil, "status", "--server", addr, "-o", output)
		require.Equal(t, exitOK, r.code, r.stderr)
		words := strings.Fields(r.stdout)
		for _, c := range cannedTarget.GetConsumers() {
			for _, reason := range c.GetReasons() {
				require.Contains(t, strings.Join(words, " "), reason, "-o %s cut a reason", output)
			}
		}
		require.NotContains(t, r.stdout, "...")
	}
}

func TestCompletionWritesAScriptForEachShell(t *testing.T) {
	t.Parallel()
	want := map[string]string{"bash": "# bash completion V2 for pelwarden", "zsh": "#compdef pelwarden", "fish": "# fish completion for pelwarden"}
	for shell, first := range want {
		r := runCLI(t, nil, nil, "completion", shell)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.True(t, strings.HasPrefix(r.stdout, first), "%s: %.80s", shell, r.stdout)
	}
	r := runCLI(t, nil, nil, "completion", "tcsh")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `invalid argument "tcsh"`)
	r = runCLI(t, nil, nil, "__complete", "status", "-o", "")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "table\nwide\njson\nyaml\n:4\n", r.stdout, "-o completes to the four formats")
}

func TestVersionNamesTheReleaseTheCommitAndGo(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0b3a415"}, {Key: "vcs.modified", Value: "true"}}}
	cases := map[string]struct {
		ldflagsCommit string
		info          *debug.BuildInfo
		want          string
	}{
		"Go's VCS stamp":            {info: stamped, want: "commit:  0b3a415 (with uncommitted changes)\ngo:      go1.26.8 "},
		"no stamp, -ldflags commit": {ldflagsCommit: "abc123", info: &debug.BuildInfo{GoVersion: "go1.26.8"}, want: "commit:  abc123\n"},
		"neither":                   {info: &debug.BuildInfo{GoVersion: "go1.26.8"}, want: "commit:  unknown (built without VCS stamping)\n"},
		"no build information":      {want: "go:      go1."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := versionText("v0.1.0", tc.ldflagsCommit, tc.info)
			require.True(t, strings.HasPrefix(got, "version: v0.1.0\n"), got)
			require.Contains(t, got, tc.want)
		})
	}
}

func TestWrapKeepsEveryWordAndALongWordWhole(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in   string
		want []string
	}{
		"short":          {"a b", []string{"a b"}},
		"at the width":   {"aaaa bbbb cc", []string{"aaaa", "bbbb", "cc"}},
		"a long word":    {"x hb:a-very-long-key-name y", []string{"x", "hb:a-very-long-key-name", "y"}},
		"empty":          {"", []string{""}},
		"spaces squeeze": {"a   b", []string{"a b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, wrap(tc.in, 5))
		})
	}
}

func TestStatusShowsReleasedEntriesOnlyWhereThereAreSome(t *testing.T) {
	t.Parallel()
	released := &pelwardenv1.Target{Redis: "default", Stream: "jobs", Group: "workers", LivePending: 3, ReleasedPending: 5, Lag: 2}
	plain := &pelwardenv1.Target{Redis: "default", Stream: "mail", Group: "senders", LivePending: 1}
	var out strings.Builder
	_, err := renderStatus(&out, []*pelwardenv1.Target{released, plain}, formatTable)
	require.NoError(t, err)
	require.Contains(t, out.String(), "default/jobs/workers  lag 2  pending 3 live, 0 held by ghosts, 0 by degraded workers (0 unknown), 5 released (no owner, counted as work)  read 0s ago\n")
	require.Contains(t, out.String(), "default/mail/senders  lag 0  pending 1 live, 0 held by ghosts, 0 by degraded workers (0 unknown)  read 0s ago\n")
	require.Contains(t, out.String(), "pending 4 live, 0 held by ghosts, 0 by degraded workers, 5 released (no owner, counted as work); lag 2\n")
}

func TestPlanTotalsCountReleasedEntries(t *testing.T) {
	t.Parallel()
	plan := &pelwardenv1.PlanResponse{Target: &pelwardenv1.Target{Stream: "jobs", Group: "workers"}, Hygiene: "reclaim=release",
		Steps: []*pelwardenv1.PlanStep{{Consumer: "gone", Verdict: pelwardenv1.Verdict_VERDICT_GHOST, Action: "release", Entries: 7, DeadLetterEntries: 2, Reason: "ghost"}}}
	var out strings.Builder
	require.NoError(t, renderPlans(&out, []*pelwardenv1.PlanResponse{plan}, formatTable))
	require.Contains(t, out.String(), "would requeue 0 entries, claim 0, release 5, dead-letter 2; would delete 0 ghost consumer(s)\n")
}
