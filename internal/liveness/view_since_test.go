package liveness

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCallersWokenByOneEventShareOneRead: callers that each ask for a read
// started after the same moment share one read, however late each asks;
// a later moment reads again; a failed read is never served as current.
func TestCallersWokenByOneEventShareOneRead(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	var fail atomic.Bool
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		reads.Add(1)
		time.Sleep(5 * time.Millisecond) // callers arrive while the read runs, and after it
		if fail.Load() {
			return Observation{}, context.DeadlineExceeded
		}
		return Observation{}, nil
	}, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	tg := Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}
	ctx := context.Background()

	event := time.Now()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			time.Sleep(time.Duration(i%20) * time.Millisecond)
			_, err := v.RefreshSince(ctx, tg, event)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), reads.Load(), "one read for every caller of one event")

	_, err := v.RefreshSince(ctx, tg, time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(2), reads.Load(), "a later event reads again")

	fail.Store(true)
	_, err = v.RefreshSince(ctx, tg, time.Now())
	require.Error(t, err)
	_, err = v.RefreshSince(ctx, tg, event)
	require.Error(t, err, "after a failed read, an old event does not get the snapshot before it")
	require.Equal(t, int64(4), reads.Load())
}
