package admin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

func TestReportsOfTriggersWithOtherSettingsOnOneGroupAreKeptApart(t *testing.T) {
	t.Parallel()
	g := liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	legit := liveness.Target{GroupRef: g, Spec: liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: time.Second}}
	other := liveness.Target{GroupRef: g, Spec: liveness.Spec{Idle: true, GhostIdle: time.Hour}}
	now := time.Unix(1_800_000_000, 0)
	r := NewReports(10)
	r.Record(metadata.Request{Target: legit, Metric: policy.Pending, TargetValue: 5}, "s0-pelwarden", 3, now)
	// Later, on the same group and under the same metric name: another
	// target, another metric kind, another per-replica target.
	r.Record(metadata.Request{Target: other, Metric: policy.Pending, TargetValue: 5}, "s0-pelwarden", 7, now.Add(time.Second))
	r.Record(metadata.Request{Target: legit, Metric: policy.Lag, TargetValue: 5}, "s0-pelwarden", 100, now.Add(time.Second))
	r.Record(metadata.Request{Target: legit, Metric: policy.Pending, TargetValue: 1e9}, "s0-pelwarden", 3, now.Add(time.Second))
	var legits []int64
	var targets []float64
	for _, rep := range r.For(g) {
		if liveness.SameKey(rep.Target, legit) && rep.Metric == policy.Pending {
			legits, targets = append(legits, rep.Value), append(targets, rep.TargetValue)
		}
	}
	require.Equal(t, []int64{3, 3}, legits, "the legitimate trigger's value stays its own")
	require.Equal(t, []float64{5, 1e9}, targets, "each per-replica target is its own report")
	require.Len(t, r.For(g), 4)

	r.Forget(other)
	require.Len(t, r.For(g), 3, "a target's reports go with it, and only its")
	r.Forget(legit)
	require.Empty(t, r.For(g))
}

func TestReportsOfOneTargetAreBounded(t *testing.T) {
	t.Parallel()
	tg := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: liveness.Spec{Idle: true, GhostIdle: time.Minute}}
	now := time.Unix(1_800_000_000, 0)
	r := NewReports(10)
	r.Record(metadata.Request{Target: tg, Metric: policy.Pending, TargetValue: 5}, "legit", 3, now.Add(time.Hour))
	for i := range 100 {
		r.Record(metadata.Request{Target: tg, Metric: policy.Pending, TargetValue: float64(100 + i)}, "flood", 3, now.Add(time.Duration(i)*time.Second))
	}
	reps := r.For(tg.GroupRef)
	require.Len(t, reps, MaxReportsPerTarget, "at most %d reports per target", MaxReportsPerTarget)
	require.Equal(t, "legit", reps[0].MetricName, "the least recently reported go first")
}

// TestRecordingAKnownReportAllocatesNothing: GetMetrics records on every
// poll.
func TestRecordingAKnownReportAllocatesNothing(t *testing.T) {
	owner, err := liveness.ParseOwnerMatch("regex:^(?P<owner>w-[0-9]+)")
	require.NoError(t, err)
	tg := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"},
		Spec: liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{owner}", HeartbeatMaxAge: time.Second, Owner: owner}}
	req := metadata.Request{Target: tg, Metric: policy.Pending, TargetValue: 5}
	r := NewReports(10)
	now := time.Unix(1_800_000_000, 0)
	r.Record(req, "m", 1, now)
	require.Zero(t, testing.AllocsPerRun(100, func() { r.Record(req, "m", 2, now) }))
}

// TestFiguresAreEveryReportWithItsGroupAndLivenessText: the metrics page's
// list has each report of every target, with the target's group and the
// text of its liveness settings in place of the target.
func TestFiguresAreEveryReportWithItsGroupAndLivenessText(t *testing.T) {
	t.Parallel()
	g := liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	quick := liveness.Target{GroupRef: g, Spec: liveness.Spec{Idle: true, GhostIdle: time.Second}}
	slow := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "other", Group: "workers"}, Spec: liveness.Spec{Idle: true, GhostIdle: time.Hour}}
	now := time.Unix(1_800_000_000, 0)
	r := NewReports(10)
	r.Record(metadata.Request{Target: quick, Metric: policy.Pending, TargetValue: 5, Activation: 1}, "m", 3, now)
	r.Record(metadata.Request{Target: quick, Metric: policy.Lag, TargetValue: 7}, "m", 4, now)
	r.Record(metadata.Request{Target: slow, Metric: policy.Pending, TargetValue: 5}, "m", 5, now.Add(time.Second))
	require.ElementsMatch(t, []Figure{
		{Group: g, Liveness: quick.Spec.String(), Metric: policy.Pending, TargetValue: 5, Value: 3, At: now},
		{Group: g, Liveness: quick.Spec.String(), Metric: policy.Lag, TargetValue: 7, Value: 4, At: now},
		{Group: slow.GroupRef, Liveness: slow.Spec.String(), Metric: policy.Pending, TargetValue: 5, Value: 5, At: now.Add(time.Second)},
	}, r.Figures())
}
