package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// TestLongNamesAreCutInEveryLabelAndStayApart: two targets whose stream,
// group and liveness settings are a kilobyte each and differ only at the
// end. Every label value of every family is at most
// liveness.MaxLabelValue, and the two targets are still two series.
func TestLongNamesAreCutInEveryLabelAndStayApart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	long := strings.Repeat("n", metadata.MaxNameLen-1)
	spec := liveness.Spec{Heartbeat: true, HeartbeatKey: strings.Repeat("h", 1000) + "{consumer}", HeartbeatMaxAge: time.Second}
	a := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: long + "a", Group: long + "a"}, Spec: spec}
	b := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: long + "b", Group: long + "b"}, Spec: spec}
	fetch := func(context.Context, liveness.Target, []string) (liveness.Observation, error) {
		return liveness.Observation{ServerTime: now, LagValid: true}, nil
	}
	view := liveness.NewView(fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 10, Now: func() time.Time { return now }})
	reports := admin.NewReports(10)
	for _, tg := range []liveness.Target{a, b} {
		_, err := view.Snapshot(t.Context(), tg)
		require.NoError(t, err)
		reports.Record(metadata.Request{Target: tg, Metric: policy.Pending, TargetValue: 5}, "m", 1, now)
	}
	reg := prometheus.NewRegistry()
	podSets := func() []kube.SetState {
		return []kube.SetState{{Set: liveness.PodSet{Namespace: "jobs", Selector: "app in (" + long + ")"}}}
	}
	m := newMetrics(reg, view, reports, podSets, func() time.Time { return now })
	m.hygiene = func() []hygiene.GroupSeries { return []hygiene.GroupSeries{{Group: a.GroupRef}, {Group: b.GroupRef}} }
	m.refreshed(a, nil, errors.New("read failed"), time.Millisecond)
	m.refreshed(b, nil, errors.New("read failed"), time.Millisecond)

	mfs := scrape(t, m.handler(reg), nil)
	for name, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				require.LessOrEqual(t, len(l.GetValue()), liveness.MaxLabelValue, "%s{%s}", name, l.GetName())
			}
		}
	}
	for _, name := range []string{"pelwarden_live_pending_entries", "pelwarden_lag_entries", "pelwarden_scaler_reported_value",
		"pelwarden_hygiene_scans_total", "pelwarden_redis_errors_total"} {
		require.Len(t, mfs[name].GetMetric(), 2, "%s: the two targets stay two series", name)
	}
	require.NotEmpty(t, mfs["pelwarden_pod_watch_state"].GetMetric())

	// An expired target's counters go, under the label values they were
	// counted with.
	m.expired(a)
	require.Len(t, scrape(t, m.handler(reg), nil)["pelwarden_redis_errors_total"].GetMetric(), 1)
}
