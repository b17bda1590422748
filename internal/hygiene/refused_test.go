package hygiene

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestHygienePausesWhileRedisRefusesWrites: a ghost holds entries while
// Redis refuses writes (OOM). The first turn's lease is refused, and the
// turns after it are left out: no script is sent, nothing is taken (a
// sample that finds no write refused since the last, nobody having tried,
// lets a turn try once more). Once Redis accepts writes again, the
// ghost's entries are given back.
func TestHygienePausesWhileRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "g", 5)
	undo := srv.Cause(t, redistest.FaultOOM)
	time.Sleep(300 * time.Millisecond) // the ghost idles past ghostIdle
	reg := prometheus.NewRegistry()
	l := newLoopOn(t, srv.Addr(), 100*time.Millisecond, nil, reg, nil)
	require.NoError(t, l.Add(target(t), true))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	paused := func(n float64) func() bool {
		return func() bool { return testutil.ToFloat64(l.metrics.paused) >= n }
	}
	require.Eventually(t, paused(1), 5*time.Second, 20*time.Millisecond, "turns are left out once the lease's write was refused")
	// For a second, less than the least time between two samples of the
	// node: no sample can say meanwhile that writes are accepted again.
	before, n := redistest.CommandCalls(t, rdb), testutil.ToFloat64(l.metrics.paused)
	time.Sleep(time.Second)
	calls, _ := redistest.CallsSince(before, redistest.CommandCalls(t, rdb))
	require.Greater(t, testutil.ToFloat64(l.metrics.paused), n, "turns go on being left out")
	require.Zero(t, calls["evalsha"]+calls["eval"], "no lease and no script is sent to a node that refuses writes: %v", calls)
	require.Equal(t, int64(5), pendingOf(t, rdb)["ghost"], "nothing is taken")

	undo()
	back := time.Now()
	defer func() { t.Logf("given back %s after writes were accepted", time.Since(back)) }()
	require.Eventually(t, func() bool { return pendingOf(t, rdb)["ghost"] == 0 }, 10*time.Second, 50*time.Millisecond,
		"writes accepted again: the ghost's entries are given back")
}
