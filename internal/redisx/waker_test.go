package redisx

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestWakerArmsAStreamOnceForAllItsWaiters: many waiters on one stream
// cost one XREVRANGE and one CLIENT UNBLOCK, not one each; one XADD wakes
// them all, with the moment it was read; arming again after the wake
// costs the same once more; and the last waiter to stop disarms the
// stream.
func TestWakerArmsAStreamOnceForAllItsWaiters(t *testing.T) {
	t.Parallel()
	const waiters = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	w := NewWaker(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"f", "v"}}).Err())

	armAll := func() []*Wake {
		t.Helper()
		wakes := make([]*Wake, waiters)
		var wg sync.WaitGroup
		for i := range wakes {
			wg.Go(func() {
				k, err := w.Arm(ctx, "jobs")
				require.NoError(t, err)
				wakes[i] = k
			})
		}
		wg.Wait()
		return wakes
	}
	before := redistest.CommandCalls(t, rdb)
	wakes := armAll()
	armed := redistest.CommandCalls(t, rdb)
	by, _ := redistest.CallsSince(before, armed)
	require.Equal(t, int64(1), by["xrevrange"], "one XREVRANGE for %d waiters: %v", waiters, by)
	require.LessOrEqual(t, by["client|unblock"], int64(1), "at most one CLIENT UNBLOCK for %d waiters: %v", waiters, by)
	require.Equal(t, 1, w.ArmedStreams())

	time.Sleep(20 * time.Millisecond) // let the loop block on the stream first
	added := time.Now()
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"f", "v"}}).Err())
	for i, k := range wakes {
		select {
		case <-k.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d: no wake within 10s of the XADD", i)
		}
		require.False(t, k.Fired().Before(added), "waiter %d: the wake is dated after the XADD", i)
		require.False(t, k.Fired().Before(k.Armed()), "waiter %d: fired after it was armed", i)
	}
	require.Zero(t, w.ArmedStreams(), "a fired stream is no longer armed")

	again := armAll()
	by, _ = redistest.CallsSince(armed, redistest.CommandCalls(t, rdb))
	require.Equal(t, int64(1), by["xrevrange"], "arming again after the wake costs one XREVRANGE: %v", by)
	for _, k := range wakes {
		k.Stop() // a fired hold stops without disarming the new watch
	}
	require.Equal(t, 1, w.ArmedStreams(), "the new watch is still armed for its own holders")
	for i, k := range again {
		k.Stop()
		k.Stop() // twice is once
		if i < len(again)-1 {
			require.Equal(t, 1, w.ArmedStreams(), "armed while one holder is left")
		}
	}
	require.Zero(t, w.ArmedStreams(), "the last holder disarms the stream")
}

// TestWakerJoinerOfAFailedArmGetsItsError: a waiter that joins an arming
// which fails gets the failure, and the stream is not left armed.
func TestWakerJoinerOfAFailedArmGetsItsError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	require.NoError(t, rdb.Set(ctx, "notastream", "x", 0).Err())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	w := NewWaker(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := w.Arm(ctx, "notastream")
			require.ErrorContains(t, err, "WRONGTYPE")
		})
	}
	wg.Wait()
	require.Zero(t, w.ArmedStreams())
}
