package app

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// exposed is a metrics page with two targets on group a (a short and a
// long ghostIdle: the consumer idle 10s is a ghost only to the first) and
// one on group b, each read once, and three reports.
func exposed(t *testing.T) (http.Handler, liveness.Target) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	groupA := liveness.GroupRef{Conn: "default", Stream: "s", Group: "a"}
	short := liveness.Target{GroupRef: groupA, Spec: liveness.Spec{Idle: true, GhostIdle: time.Second}}
	long := liveness.Target{GroupRef: groupA, Spec: liveness.Spec{Idle: true, GhostIdle: time.Hour}}
	other := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "s", Group: "b"}, Spec: short.Spec}
	fetch := func(_ context.Context, tg liveness.Target, _ []string) (liveness.Observation, error) {
		obs := liveness.Observation{ServerTime: now, Lag: 7, LagValid: tg.Group == "a",
			Consumers:         []liveness.ConsumerObs{{Name: "w", Pending: 2, Idle: 10 * time.Second, Inactive: -1}},
			PendingByConsumer: map[string]int64{"w": 2}}
		obs.LagEstimate = 3
		return obs, nil
	}
	view := liveness.NewView(fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 10, Now: func() time.Time { return now }})
	for _, tg := range []liveness.Target{short, long, other} {
		_, err := view.Snapshot(t.Context(), tg)
		require.NoError(t, err)
	}
	reports := admin.NewReports(10)
	reports.Record(metadata.Request{Target: short, Metric: policy.Pending, TargetValue: 5}, "m1", 2, now)
	reports.Record(metadata.Request{Target: long, Metric: policy.Pending, TargetValue: 10}, "m2", 0, now.Add(time.Second))
	reports.Record(metadata.Request{Target: other, Metric: policy.Pending, TargetValue: 5}, "m1", 4, now)
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, view, reports, nil, func() time.Time { return now.Add(3 * time.Second) })
	m.hygiene = func() []hygiene.GroupSeries {
		return []hygiene.GroupSeries{{Group: other.GroupRef, Scans: 4}, {Group: groupA, Leader: true, Scans: 7}}
	}
	return m.handler(reg), short
}

func scrape(t *testing.T, h http.Handler, header http.Header) map[string]*dto.MetricFamily {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header = header
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	var body io.Reader = rec.Body
	if rec.Header().Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(rec.Body)
		require.NoError(t, err)
		body = gz
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(body)
	require.NoError(t, err, "the page is valid text exposition, each family once")
	return mfs
}

// series maps a family's series, by their label values in the order
// redis, stream, group, then the others by name, joined with "/", to their
// values.
func series(mf *dto.MetricFamily) map[string]float64 {
	out := make(map[string]float64)
	for _, m := range mf.GetMetric() {
		byName := map[string]string{}
		var extra []string
		for _, l := range m.GetLabel() {
			byName[l.GetName()] = l.GetValue()
			if !slices.Contains(liveness.LabelNames, l.GetName()) {
				extra = append(extra, l.GetValue())
			}
		}
		lv := []string{byName["redis"], byName["stream"], byName["group"]}
		if byName["redis"] == "" {
			lv = nil
		}
		out[strings.Join(append(lv, extra...), "/")] = m.GetGauge().GetValue()
	}
	return out
}

func TestMetricsPageRendersEachTargetsSeriesFromTheView(t *testing.T) {
	t.Parallel()
	h, short := exposed(t)
	long := short
	long.Spec.GhostIdle = time.Hour
	mfs := scrape(t, h, http.Header{})
	require.Equal(t, map[string]float64{
		"default/s/a/" + short.Spec.String(): 2, "default/s/a/" + long.Spec.String(): 0, "default/s/b/" + short.Spec.String(): 2,
	}, series(mfs["pelwarden_ghost_pending_entries"]), "each target judges the group's consumer by its own ghostIdle")
	require.Equal(t, map[string]float64{
		"default/s/a/" + short.Spec.String(): 0, "default/s/a/" + long.Spec.String(): 2, "default/s/b/" + short.Spec.String(): 0,
	}, series(mfs["pelwarden_live_pending_entries"]))
	require.Equal(t, map[string]float64{
		"default/s/a/" + short.Spec.String(): 3, "default/s/a/" + long.Spec.String(): 3, "default/s/b/" + short.Spec.String(): 3,
	}, series(mfs["pelwarden_snapshot_age_seconds"]), "the age is the clock's now less the read's")
	for _, f := range judgedFamilies {
		require.Len(t, mfs[f.name].GetMetric(), 3, "%s has one series per target", f.name)
	}
	require.Equal(t, map[string]float64{"default/s/a": 7, "default/s/b": 3}, series(mfs["pelwarden_lag_entries"]), "one lag per group; b's is the estimate")
	require.Equal(t, map[string]float64{"default/s/a": 0, "default/s/b": 1}, series(mfs["pelwarden_lag_estimated"]))
	require.Equal(t, map[string]float64{
		"default/s/a/" + short.Spec.String() + "/pendingEntriesCount/5": 2, "default/s/a/" + long.Spec.String() + "/pendingEntriesCount/10": 0,
		"default/s/b/" + short.Spec.String() + "/pendingEntriesCount/5": 4,
	}, series(mfs["pelwarden_scaler_reported_value"]), "two targets on one group each keep their own series")
	require.Equal(t, map[string]float64{
		"default/s/a/" + short.Spec.String() + "/pendingEntriesCount/5": 5, "default/s/a/" + long.Spec.String() + "/pendingEntriesCount/10": 10,
		"default/s/b/" + short.Spec.String() + "/pendingEntriesCount/5": 5,
	}, series(mfs["pelwarden_scaler_target_value"]))
	require.Equal(t, map[string]float64{"": 3}, series(mfs["pelwarden_targets"]), "the registry's families come along")
	require.Equal(t, map[string]float64{"default/s/a": 1, "default/s/b": 0}, series(mfs["pelwarden_hygiene_leader"]))
	require.Equal(t, dto.MetricType_COUNTER, mfs["pelwarden_hygiene_scans_total"].GetType())
	scans := map[string]float64{}
	for _, m := range mfs["pelwarden_hygiene_scans_total"].GetMetric() {
		scans[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue() // labels sorted: group, redis, stream
	}
	require.Equal(t, map[string]float64{"a": 7, "b": 4}, scans)
}

func TestMetricsPageSortsLabelsByNameAsARegistryDoes(t *testing.T) {
	t.Parallel()
	h, _ := exposed(t)
	for _, mf := range scrape(t, h, http.Header{}) {
		for _, m := range mf.GetMetric() {
			require.True(t, slices.IsSortedFunc(m.GetLabel(), func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) }),
				"%s: labels %v", mf.GetName(), m.GetLabel())
		}
	}
}

func TestMetricsPageIsTheSameCompressedWhenTheScraperAcceptsGzip(t *testing.T) {
	t.Parallel()
	h, _ := exposed(t)
	plain := scrape(t, h, http.Header{})
	zipped := scrape(t, h, http.Header{"Accept-Encoding": {"deflate, gzip;q=1.0"}})
	require.Len(t, zipped, len(plain))
	for name, mf := range plain {
		require.Equal(t, series(mf), series(zipped[name]), name)
	}
}

func TestMetricsPageWithNoTargetsHasNoEmptyFamilies(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	view := liveness.NewView(nil, liveness.ViewOptions{MaxTargets: 1})
	m := newMetrics(reg, view, admin.NewReports(1), nil, time.Now)
	mfs := scrape(t, m.handler(reg), http.Header{})
	require.NotContains(t, mfs, "pelwarden_live_pending_entries")
	require.NotContains(t, mfs, "pelwarden_scaler_reported_value")
	require.Contains(t, mfs, "pelwarden_targets")
}

// TestReportsThatDifferOnlyInActivationAreOneSeriesTheLatest: two
// ScaledObjects with the same target and metric but other activations
// share one series, whose value is the one reported last, whatever order
// the reports come in; every other report is a series of its own.
func TestReportsThatDifferOnlyInActivationAreOneSeriesTheLatest(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	g := liveness.GroupRef{Conn: "default", Stream: "s", Group: "a"}
	short := liveness.Spec{Idle: true, GhostIdle: time.Second}.String()
	long := liveness.Spec{Idle: true, GhostIdle: time.Hour}.String()
	figs := []admin.Figure{
		{Group: g, Liveness: short, Metric: policy.Pending, TargetValue: 5, Value: 1, At: now},
		{Group: g, Liveness: short, Metric: policy.Pending, TargetValue: 5, Value: 2, At: now.Add(2 * time.Second)},
		{Group: g, Liveness: short, Metric: policy.Pending, TargetValue: 5, Value: 3, At: now.Add(time.Second)},
		{Group: g, Liveness: long, Metric: policy.Pending, TargetValue: 5, Value: 4, At: now},
		{Group: g, Liveness: short, Metric: policy.Lag, TargetValue: 5, Value: 5, At: now},
		{Group: g, Liveness: short, Metric: policy.Pending, TargetValue: 6, Value: 6, At: now},
	}
	for turn := range len(figs) {
		in := append(slices.Clone(figs[turn:]), figs[:turn]...)
		var values []int64
		for _, f := range latestFigures(in) {
			values = append(values, f.Value)
		}
		slices.Sort(values)
		require.Equal(t, []int64{2, 4, 5, 6}, values, "turn %d", turn)
	}
}

// TestAReadThatFailedShowsAsReadFailingUntilOneSucceeds: a target whose
// latest read failed has a pelwarden_read_failing series, which the alert
// on KEDA getting errors watches; a target read well has none, and the
// failing one loses its series at its next good read.
func TestAReadThatFailedShowsAsReadFailingUntilOneSucceeds(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	fetch := func(_ context.Context, tg liveness.Target, _ []string) (liveness.Observation, error) {
		if tg.Group == "b" && down.Load() {
			return liveness.Observation{}, errors.New("connection refused")
		}
		return liveness.Observation{LagValid: true}, nil
	}
	view := liveness.NewView(fetch, liveness.ViewOptions{Freshness: time.Nanosecond, FetchTimeout: time.Second, MaxTargets: 10})
	spec := liveness.Spec{Idle: true, GhostIdle: time.Second}
	good := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "s", Group: "a"}, Spec: spec}
	bad := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "s", Group: "b"}, Spec: spec}
	_, err := view.Snapshot(t.Context(), good)
	require.NoError(t, err)
	_, err = view.Snapshot(t.Context(), bad)
	require.Error(t, err)
	reg := prometheus.NewRegistry()
	h := newMetrics(reg, view, admin.NewReports(10), nil, time.Now).handler(reg)

	got := series(scrape(t, h, nil)["pelwarden_read_failing"])
	require.Equal(t, map[string]float64{"default/s/b/" + liveness.LabelValue(spec.String()): 1}, got)
	down.Store(false)
	_, err = view.Snapshot(t.Context(), bad)
	require.NoError(t, err)
	require.NotContains(t, scrape(t, h, nil), "pelwarden_read_failing", "no target fails")
}
