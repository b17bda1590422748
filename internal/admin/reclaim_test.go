package admin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestEachEntryOutcomeSaysWhatHappenedInAnOperatorsWords: an outcome of
// the script reaches the API with a detail that names the owner, the
// threshold or the copy.
func TestEachEntryOutcomeSaysWhatHappenedInAnOperatorsWords(t *testing.T) {
	t.Parallel()
	st := reclaim.Step{Owner: liveness.ConsumerView{Name: "ghost"}, MinIdle: 30 * time.Second}
	tests := map[string]struct {
		in         redisx.EntryOutcome
		wantDetail string
	}{
		"not pending":        {redisx.EntryOutcome{Outcome: redisx.NotPending}, "acknowledged already"},
		"someone else's":     {redisx.EntryOutcome{Outcome: redisx.OwnerChanged}, `no longer owned by "ghost"`},
		"too fresh":          {redisx.EntryOutcome{Outcome: redisx.NotIdle}, "idle less than 30s"},
		"requeued":           {redisx.EntryOutcome{Outcome: redisx.Requeued, Detail: "9-0"}, "9-0"},
		"requeued, dry run":  {redisx.EntryOutcome{Outcome: redisx.Requeued}, "dry run: nothing written"},
		"claimed":            {redisx.EntryOutcome{Outcome: redisx.Claimed, Detail: "live"}, "live"},
		"tombstoned":         {redisx.EntryOutcome{Outcome: redisx.Tombstoned}, "stream entry was deleted"},
		"named twice":        {redisx.EntryOutcome{Outcome: redisx.DuplicateID}, "acted on once"},
		"failed, with cause": {redisx.EntryOutcome{Outcome: redisx.Failed, Detail: "requeue: OOM"}, "requeue: OOM"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.in.ID = "1-1"
			got := entryOutcome(tc.in, st)
			require.Equal(t, "1-1", got.GetId())
			require.Equal(t, string(tc.in.Outcome), got.GetOutcome())
			require.Contains(t, got.GetDetail(), tc.wantDetail)
		})
	}
}
