package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestAScrapeShowsTheCapOfCallerTargetsSharedByNamespace: 10,000 targets
// that callers' triggers name, 9,901 of them by one namespace and one
// each by 99 others, and one of the operator's. A scrape shows the
// operator's and scaler.maxMetricsTargets of the callers': every small
// namespace's, and what they leave to the large one; the rest are
// counted hidden. A stream name with a NUL and a right-to-left override
// reaches its labels escaped. The series and bytes of the scrape, at the
// cap and without one, are logged.
func TestAScrapeShowsTheCapOfCallerTargetsSharedByNamespace(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	fetch := func(context.Context, liveness.Target, []string) (liveness.Observation, error) {
		return liveness.Observation{ServerTime: now, LagValid: true, Lag: 1,
			Consumers:         []liveness.ConsumerObs{{Name: "w", Pending: 2, Idle: time.Second, Inactive: -1}},
			PendingByConsumer: map[string]int64{"w": 2}}, nil
	}
	view := liveness.NewView(fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 20000, Now: func() time.Time { return now }})
	spec := liveness.Spec{Idle: true, GhostIdle: time.Minute}
	target := func(stream string) liveness.Target {
		return liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: "workers"}, Spec: spec}
	}
	namespaces := map[string]string{}
	for i := range 10000 {
		stream, ns := fmt.Sprintf("flood-%05d", i), "flood"
		if i < 99 {
			stream, ns = fmt.Sprintf("small-%02d", i), fmt.Sprintf("team-%02d", i)
		}
		if i == 0 {
			stream = "jobs\x00\u202egpj" // a hostile name, team-00's
		}
		_, err := view.Snapshot(t.Context(), target(stream))
		require.NoError(t, err)
		namespaces[target(stream).Key()] = ns
	}
	operator := target("operator-jobs")
	_, err := view.Snapshot(t.Context(), operator)
	require.NoError(t, err)
	holders := func() (map[string]string, map[string]bool) {
		return namespaces, map[string]bool{operator.Key(): true}
	}

	scrapeText := func(e exposure) (string, *metrics) {
		reg := prometheus.NewRegistry()
		m := newMetrics(reg, view, admin.NewReports(20000), nil, func() time.Time { return now })
		m.exposure = e
		rec := httptest.NewRecorder()
		m.handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		return rec.Body.String(), m
	}
	body, m := scrapeText(exposure{max: 1000, holders: holders})
	live := seriesOf(body, "pelwarden_live_pending_entries")
	require.Len(t, live, 1001, "the cap of callers' targets, and the operator's")
	shownText := strings.Join(live, "\n")
	require.Equal(t, 1, strings.Count(shownText, `stream="operator-jobs"`), "the operator's target is shown")
	for i := 1; i < 99; i++ {
		require.Equal(t, 1, strings.Count(shownText, fmt.Sprintf(`stream="small-%02d"`, i)), "small namespace %d's target is shown", i)
	}
	require.Equal(t, 901, strings.Count(shownText, `stream="flood-`), "the large namespace gets what the others leave")
	require.Equal(t, int64(9000), m.hidden.Load())
	require.Equal(t, 1, strings.Count(body, "\npelwarden_metrics_targets_hidden 9000\n"), "the scrape counts the targets it leaves out")
	require.Equal(t, 1, strings.Count(shownText, `stream="jobs\\u{0}\\u{202e}gpj~`), "the hostile name is escaped (the text format doubles the backslash)")
	require.False(t, strings.ContainsAny(body, "\x00\u202e"), "no NUL or override reaches the scrape")

	all, _ := scrapeText(exposure{})
	t.Logf("a text scrape of 10,001 targets: %d per-target series, %d bytes at scaler.maxMetricsTargets 1000; %d series, %d bytes without a cap",
		perTargetSeries(body), len(body), perTargetSeries(all), len(all))
	require.Less(t, len(body), len(all)/5)
}

// seriesOf is the lines of family's series in a text scrape.
func seriesOf(body, family string) []string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, family+"{") {
			out = append(out, line)
		}
	}
	return out
}

// perTargetSeries counts the series of the per-target families.
func perTargetSeries(body string) int {
	n := 0
	for _, f := range targetFamilies() {
		n += len(seriesOf(body, f.Name))
	}
	return n
}

// TestAScrapeShowsTheCapOfFailingTargets: in an outage every target's read
// fails, and none has a snapshot to be chosen by; the failing family still
// shows the operator's target and scaler.maxMetricsTargets of the
// callers', not one series per target callers named.
func TestAScrapeShowsTheCapOfFailingTargets(t *testing.T) {
	t.Parallel()
	view := liveness.NewView(func(context.Context, liveness.Target, []string) (liveness.Observation, error) {
		return liveness.Observation{}, errors.New("connection refused")
	}, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 5000})
	spec := liveness.Spec{Idle: true, GhostIdle: time.Minute}
	target := func(stream string) liveness.Target {
		return liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: "workers"}, Spec: spec}
	}
	namespaces := map[string]string{}
	for i := range 3000 {
		tg := target(fmt.Sprintf("flood-%04d", i))
		_, err := view.Snapshot(t.Context(), tg)
		require.Error(t, err)
		namespaces[tg.Key()] = "flood"
	}
	operator := target("operator-jobs")
	_, err := view.Snapshot(t.Context(), operator)
	require.Error(t, err)
	holders := func() (map[string]string, map[string]bool) { return namespaces, map[string]bool{operator.Key(): true} }

	reg := prometheus.NewRegistry()
	m := newMetrics(reg, view, admin.NewReports(100), nil, time.Now)
	m.exposure = exposure{max: 1000, holders: holders}
	rec := httptest.NewRecorder()
	m.handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	failing := seriesOf(rec.Body.String(), failingFamily.name)
	require.Len(t, failing, 1001, "the cap of callers' failing targets, and the operator's")
	require.Equal(t, 1, strings.Count(strings.Join(failing, "\n"), `stream="operator-jobs"`))
}
