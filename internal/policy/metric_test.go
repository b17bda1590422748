package policy

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// The group of the report that found released entries missing: a live
// worker released 5 of its 8 entries (XNACK) and 2 entries wait unread;
// a ghost holds 40.
func TestValueCountsReleasedEntriesAsWorkAndLeavesTheGhostsOut(t *testing.T) {
	t.Parallel()
	s := &liveness.Snapshot{LivePending: 3, ReleasedPending: 5, GhostPending: 40, Lag: 2}
	for m, want := range map[Metric]int64{Pending: 8, Lag: 2, Backlog: 10} {
		require.Equal(t, want, Value(m, s), m.Key())
	}
	missing := &liveness.Snapshot{StreamMissing: true, ReleasedPending: 5}
	require.Zero(t, Value(Pending, missing), "a missing stream is no work")
}
