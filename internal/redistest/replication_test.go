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

// TestAMasterFrozenForSecondsIsNotFailedOver freezes the master for longer
// than a loaded machine's pause: with the default DownAfter the sentinels
// keep it, so a test that holds the master's handle from its start still
// holds the master. With a DownAfter of 1s they failed it over.
func TestAMasterFrozenForSecondsIsNotFailedOver(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, SentinelOptions{})
	master := s.Master(t)
	master.Pause(3 * time.Second)
	time.Sleep(3 * time.Second)
	master.Resume()
	require.Equal(t, master.Addr(), s.Master(t).Addr(), "the sentinels still name the frozen master")
	WaitReplicated(t, master.Client(t))
}
