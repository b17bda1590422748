package reclaim

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestForgetDeletesTheSeriesOfAGroupWithALongName: series are counted
// under the group's cut label values, and Forget matches the same ones.
func TestForgetDeletesTheSeriesOfAGroupWithALongName(t *testing.T) {
	t.Parallel()
	view := liveness.NewView(nil, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 1})
	engine, err := New(Options{View: view, BatchSize: 1}, prometheus.NewRegistry())
	require.NoError(t, err)
	g := liveness.GroupRef{Conn: "default", Stream: strings.Repeat("s", 1000), Group: strings.Repeat("g", 1000)}
	engine.CountError(g)
	require.Equal(t, 1, testutil.CollectAndCount(engine.metrics.errors))
	engine.Forget(g)
	require.Zero(t, testutil.CollectAndCount(engine.metrics.errors), "the group's series went")
}
