package admin

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestADryRunSaysWhatTheGuardWouldDo mirrors the script's guard and action
// on one entry, read without touching it.
func TestADryRunSaysWhatTheGuardWouldDo(t *testing.T) {
	t.Parallel()
	b := batch{owner: "ghost", minIdle: 30 * time.Second, claimTo: "live"}
	h := policy.Hygiene{MaxDeliveries: 3, DeadLetterStream: "jobs:dead"}
	entry := func(owner string, idle time.Duration, deliveries int64) *redis.XPendingExt {
		return &redis.XPendingExt{ID: "1-1", Consumer: owner, Idle: idle, RetryCount: deliveries}
	}
	tests := map[string]struct {
		entry      *redis.XPendingExt
		mode       redisx.Mode
		want       string
		wantDetail string
	}{
		"not pending":             {nil, redisx.ModeRequeue, redisx.NotPending, "acknowledged already"},
		"someone else's":          {entry("live", time.Hour, 1), redisx.ModeRequeue, redisx.OwnerChanged, `no longer owned by "ghost"`},
		"too fresh":               {entry("ghost", time.Second, 1), redisx.ModeRequeue, redisx.NotIdle, "idle less than 30s"},
		"requeued":                {entry("ghost", time.Minute, 1), redisx.ModeRequeue, redisx.Requeued, "dry run"},
		"claimed":                 {entry("ghost", time.Minute, 1), redisx.ModeClaim, redisx.Claimed, "live"},
		"poison is dead-lettered": {entry("ghost", time.Minute, 3), redisx.ModeClaim, redisx.DeadLettered, "jobs:dead"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := wouldReclaim(tc.entry, b, h, tc.mode)
			require.Equal(t, tc.want, got.GetOutcome())
			require.Contains(t, got.GetDetail(), tc.wantDetail)
		})
	}
}
