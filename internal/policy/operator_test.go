package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func TestOperatorThreshold(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	hard := requeueStale
	hard.HardTimeout = 10 * time.Minute
	ghost := liveness.ConsumerView{Name: "g", Verdict: liveness.Ghost}
	podGone := liveness.ConsumerView{Name: "p", Verdict: liveness.Ghost, GoneAt: now.Add(-3 * time.Second)}
	alive := liveness.ConsumerView{Name: "a", Verdict: liveness.Alive}
	unknown := liveness.ConsumerView{Name: "u", Verdict: liveness.Unknown}
	cases := map[string]struct {
		owner   liveness.ConsumerView
		seen    bool
		h       Hygiene
		force   bool
		want    time.Duration
		refusal string
	}{
		"a ghost, as the loop would":                  {ghost, true, requeueStale, false, 30 * time.Second, ""},
		"a ghost whose pod went, as the loop would":   {podGone, true, requeueStale, false, 3 * time.Second, ""},
		"force changes nothing for a ghost":           {podGone, true, requeueStale, true, 3 * time.Second, ""},
		"an alive owner with a hard timeout":          {alive, true, hard, false, 10 * time.Minute, ""},
		"force lowers a hard timeout to entry stale":  {alive, true, hard, true, 30 * time.Second, ""},
		"an alive owner is refused":                   {alive, true, requeueStale, false, 0, `"a" is Alive`},
		"an alive owner with force":                   {alive, true, requeueStale, true, 30 * time.Second, ""},
		"an unknown owner is refused even with hard":  {unknown, true, hard, false, 0, "Unknown liveness"},
		"an unknown owner with force":                 {unknown, true, requeueStale, true, 30 * time.Second, ""},
		"a name the view has not seen is refused":     {liveness.ConsumerView{Name: "new"}, false, requeueStale, false, 0, "not among the group's consumers"},
		"a name the view has not seen, with force":    {liveness.ConsumerView{Name: "new"}, false, requeueStale, true, 30 * time.Second, ""},
		"an unseen name is not judged by a zero view": {ghost, false, requeueStale, false, 0, "not among"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, refusal := OperatorThreshold(tc.owner, tc.seen, tc.h, now, tc.force)
			require.Equal(t, tc.want, got)
			if tc.refusal == "" {
				require.Empty(t, refusal)
				return
			}
			require.Contains(t, refusal, tc.refusal)
			require.Contains(t, refusal, "force", "a refusal says how to override it")
		})
	}
}

func TestDescribeNamesTheMetadataKeys(t *testing.T) {
	t.Parallel()
	h := Hygiene{Mode: ReclaimClaim, EntryStale: 1500 * time.Millisecond, MaxDeliveries: 5, DeadLetterStream: "jobs:dead",
		DeleteGhostConsumers: true, ClaimFallback: FallbackSkip}
	require.Equal(t, "reclaim=claim entryStaleSeconds=1.5 hardTimeoutSeconds=0 maxDeliveries=5 deadLetterStream=jobs:dead "+
		"deliveryCountField=off deleteGhostConsumers=true deleteOriginal=false claimFallback=skip dryRun=false", h.Describe())
}
