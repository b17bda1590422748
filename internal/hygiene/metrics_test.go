package hygiene

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func TestGroupSeriesCountScansAndTheLeaseUntilTheGroupIsForgotten(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := &Loop{metrics: newMetrics(reg, func() float64 { return 0 })}
	a := liveness.GroupRef{Conn: "default", Stream: "a", Group: "workers"}
	b := liveness.GroupRef{Conn: "default", Stream: "b", Group: "workers"}
	require.Empty(t, l.Series(), "nothing before a scan or a lease")
	l.metrics.setLeader(a, true)
	l.metrics.observeScan(a, time.Millisecond)
	l.metrics.observeScan(a, time.Second)
	l.metrics.setLeader(b, true)
	l.metrics.setLeader(b, false)
	require.ElementsMatch(t, []GroupSeries{{Group: a, Leader: true, Scans: 2}, {Group: b}}, l.Series())
	n, err := testutil.GatherAndCount(reg, "pelwarden_hygiene_scan_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n, "one histogram over all groups")
	require.Equal(t, uint64(2), histogramCount(t, reg))
	l.metrics.forget(b)
	require.Equal(t, []GroupSeries{{Group: a, Leader: true, Scans: 2}}, l.Series())
}

func histogramCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "pelwarden_hygiene_scan_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no pelwarden_hygiene_scan_duration_seconds")
	return 0
}
