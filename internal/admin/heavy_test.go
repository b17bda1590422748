package admin

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPlanFindingsAndListPendingRunAtMostTwoAtOnce: their Redis load is
// bounded by calls at once; one more is refused at once, and a finished
// call frees its slot.
func TestPlanFindingsAndListPendingRunAtMostTwoAtOnce(t *testing.T) {
	t.Parallel()
	s := &Server{heavy: make(chan struct{}, maxHeavyCalls)}
	var releases []func()
	for range maxHeavyCalls {
		release, err := s.heavyCall("Plan")
		require.NoError(t, err)
		releases = append(releases, release)
	}
	_, err := s.heavyCall("Findings")
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Contains(t, err.Error(), "Findings: 2 Plan, Findings, ListPending and dry-run Reclaim calls are already running")
	releases[0]()
	release, err := s.heavyCall("ListPending")
	require.NoError(t, err, "a finished call frees its slot")
	release()
	releases[1]()
	require.Empty(t, s.heavy)
}
