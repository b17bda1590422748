package redistest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitReplicatedWaitsForAWriteOfAnotherConnection writes through one
// connection and waits through another while the replica is frozen: the
// wait lasts until the replica, resumed, holds the write.
func TestWaitReplicatedWaitsForAWriteOfAnotherConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := StartSentinel(t, SentinelOptions{})
	master := s.Master(t)
	replica := s.runningReplicas(master)[0]
	replica.Pause(time.Minute)
	t.Cleanup(replica.Resume)
	require.NoError(t, master.Client(t).Set(ctx, "k", "v", 0).Err())

	done := make(chan error, 1)
	go func() { done <- waitReplicated(ctx, master.Client(t)) }()
	select {
	case err := <-done:
		t.Fatalf("the wait ended while the replica was frozen: %v", err)
	case <-time.After(time.Second):
	}
	replica.Resume()
	require.NoError(t, <-done)
	got, err := replica.Client(t).Get(ctx, "k").Result()
	require.NoError(t, err, "GET on the replica")
	require.Equal(t, "v", got, "the replica holds the write once the wait ends")
}
