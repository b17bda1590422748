package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ruleCases holds, for every row of the verdict table, evidence that
// only that row decides: each is checked to be decided by its row with
// its row's verdict, and a row without a case fails the test.
var ruleCases = map[string]struct {
	spec Spec
	ev   Evidence
}{
	"unlisted": {spec: idleSpec(), ev: Evidence{Seen: time.Hour}},

	"shared-name-degraded": {spec: kubeSpec(true), ev: Evidence{Listed: true, Seen: time.Second, Pod: Pod{State: PodGone, GoneFor: time.Minute},
		Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second, Degraded: true}}},
	"shared-name": {spec: kubeSpec(false), ev: Evidence{Listed: true, Seen: time.Second, Pod: Pod{State: PodGone, GoneFor: time.Minute}}},
	"pod-gone-heartbeat-unreadable": {spec: kubeSpec(true), ev: Evidence{Listed: true, Seen: time.Hour, Pod: Pod{State: PodGone, GoneFor: time.Minute},
		Heartbeat: Heartbeat{State: HeartbeatError}}},
	"pod-gone-grace": {spec: kubeSpec(false), ev: Evidence{Listed: true, Seen: time.Hour, Pod: Pod{State: PodGone, GoneFor: time.Second}}},
	"pod-gone":       {spec: kubeSpec(false), ev: Evidence{Listed: true, Seen: time.Hour, Pod: Pod{State: PodGone, GoneFor: time.Minute}}},

	"no-heartbeat-records": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatMissing}, NoGroupHeartbeats: true}},
	"heartbeat-future":     {spec: heartbeatSpec(), ev: Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatFuture}}},
	"heartbeat-unreadable": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatError, Err: "WRONGTYPE"}}},
	"heartbeat-unread":     {spec: heartbeatSpec(), ev: Evidence{Listed: true}},
	"fresh-degraded":       {spec: heartbeatSpec(), ev: Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatFresh, Degraded: true}}},
	"fresh":                {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Heartbeat: Heartbeat{State: HeartbeatFresh, Age: time.Second}}},
	"pods-unobserved": {spec: kubeSpec(true), ev: Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour},
		Pod: Pod{State: PodUnobserved}}},
	"pod-terminating": {spec: kubeSpec(true), ev: Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour},
		Pod: Pod{State: PodTerminating}}},
	"starting": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Second, Known: time.Second, Heartbeat: Heartbeat{State: HeartbeatMissing}}},
	"heartbeat-outage": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour, Recovering: time.Second}}},
	"writes-refused": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour, Refused: time.Second, Refusal: RefusalOOM}}},
	"heartbeat-evicted": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatMissing, Evicting: time.Second}}},
	"heartbeat-vanished": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatMissing, Vanished: time.Second}}},
	"heartbeat-first-read": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Known: time.Hour,
		Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour, FirstRead: time.Second}}},
	"heartbeat-missing": {spec: heartbeatSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Known: time.Hour, Heartbeat: Heartbeat{State: HeartbeatMissing}}},
	"heartbeat-stale":   {spec: heartbeatSpec(), ev: Evidence{Listed: true, Known: time.Hour, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Hour}}},

	"read-recently":        {spec: idleSpec(), ev: Evidence{Listed: true, Seen: time.Second}},
	"idle-pods-unobserved": {spec: kubeSpec(false), ev: Evidence{Listed: true, Seen: time.Hour, Pod: Pod{State: PodUnobserved}}},
	"pod-running":          {spec: kubeSpec(false), ev: Evidence{Listed: true, Seen: time.Hour, Pod: Pod{State: PodRunning}}},
	"idle-outage":          {spec: idleSpec(), ev: Evidence{Listed: true, Seen: time.Hour, IdleRecovering: time.Second}},
	"idle-writes-refused":  {spec: idleSpec(), ev: Evidence{Listed: true, Seen: time.Hour, IdleRefused: time.Second, IdleRefusal: RefusalMisconf}},
	"idle-undecided":       {spec: idleSpec(), ev: Evidence{Listed: true, Seen: time.Hour, Pending: 3, IdleFromDeliveries: true}},
	"idle-past":            {spec: idleSpec(), ev: Evidence{Listed: true, Seen: time.Hour}},
}

// TestEveryRuleDecidesItsOwnCase judges each row's case: the row decides,
// with its verdict, and the judgement carries reasons.
func TestEveryRuleDecidesItsOwnCase(t *testing.T) {
	t.Parallel()
	for _, r := range Rules() {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			tc, ok := ruleCases[r.Name]
			require.True(t, ok, "the verdict table's row %q has no case in ruleCases: a new row needs a test", r.Name)
			j := Judge(tc.spec, tc.ev)
			require.Equal(t, r.Name, j.Rule, "the row that decided (reasons: %s)", ReasonsString(j.Reasons))
			require.Equal(t, r.Verdict, j.Verdict)
			require.NotEmpty(t, j.Reasons)
		})
	}
}

// TestEveryRuleCaseNamesARow keeps ruleCases in step with the table: a
// case whose row was renamed or removed fails.
func TestEveryRuleCaseNamesARow(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, r := range Rules() {
		require.False(t, names[r.Name], "row %q appears twice", r.Name)
		require.NotEmpty(t, r.When, "row %q says when it applies", r.Name)
		require.NotEmpty(t, r.Why, "row %q says why", r.Name)
		names[r.Name] = true
	}
	for name := range ruleCases {
		require.True(t, names[name], "ruleCases has %q, which is no row of the table", name)
	}
}

// TestEverySectionEndsWithARuleThatAlwaysApplies: Judge never runs past a
// section, so no evidence can leave a consumer without a verdict.
func TestEverySectionEndsWithARuleThatAlwaysApplies(t *testing.T) {
	t.Parallel()
	last := map[Section]string{}
	for _, r := range Rules() {
		last[r.Section] = r.Name
	}
	for _, s := range []Section{SectionPodGone, SectionHeartbeat, SectionIdle} {
		name := last[s]
		for _, r := range rules {
			if r.Name == name {
				require.True(t, r.applies(Spec{}, Evidence{}), "section %q ends with %q, which does not always apply", s, name)
			}
		}
	}
}
