package kube

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func selector(i int) liveness.PodSet {
	return liveness.PodSet{Namespace: "jobs", Selector: fmt.Sprintf("app=worker-%d", i)}
}

// TestPodWatchesAreCappedInAllAndPerClaimant: a claimant starts pod sets up
// to its share, everyone up to the cap, each refusal naming its setting;
// a running set is shared with any claimant at no cost; a read past the
// cap gets an observation that cannot answer; the configuration's pinned
// sets run outside the caps; and a set nobody uses for IdleExpiry frees
// its room.
func TestPodWatchesAreCappedInAllAndPerClaimant(t *testing.T) {
	t.Parallel()
	var now atomic.Int64 // read by the reflectors too
	now.Store(1000)
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	w := startWatcher(t, fake.NewClientset(), Options{MaxSets: 5, MaxSetsPerClaimant: 3, IdleExpiry: time.Minute, Now: clock})

	for i := range 3 {
		require.NoError(t, w.Admit(selector(i), "intruder"), "set %d, within the share", i)
	}
	err := w.Admit(selector(3), "intruder")
	require.ErrorIs(t, err, ErrTooManySets)
	require.ErrorContains(t, err, `namespace "intruder" started 3 pod watches, the most kubernetes.maxPodWatchesPerNamespace allows`)
	require.NoError(t, w.Admit(selector(0), "jobs"), "a running set is shared, whoever started it")
	require.NoError(t, w.Admit(selector(3), "jobs"))
	require.NoError(t, w.Admit(selector(4), "other"))
	err = w.Admit(selector(5), "jobs")
	require.ErrorIs(t, err, ErrTooManySets)
	require.ErrorContains(t, err, "5 pod watches are running, the most kubernetes.maxPodWatches allows")
	require.Contains(t, w.Observe(selector(6), []string{"w-0"}).Err, "kubernetes.maxPodWatches", "a read past the cap cannot answer: Unknown")
	require.NoError(t, w.Pin(selector(7)), "the configuration's sets run outside the caps")
	require.NoError(t, w.Pin(selector(4)), "pinning a running set takes it out of the caps")
	require.NoError(t, w.Admit(selector(8), "jobs"), "room that pinning freed")
	require.Len(t, w.States(), 7)

	now.Add(30)
	require.NoError(t, w.Admit(selector(1), "intruder"), "used again")
	now.Add(45)
	w.sweep(clock())
	require.Len(t, w.States(), 3, "idle for more than a minute: stopped, but for the pinned two and the one used since")
	for i := range 2 {
		require.NoError(t, w.Admit(selector(10+i), "intruder"), "the stopped sets' room is free again")
	}
}
