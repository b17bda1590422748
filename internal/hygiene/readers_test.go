package hygiene

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// A worker that claims another's entries (XAUTOCLAIM here, which every
// server has; XREADGROUP ... CLAIM moves them alike) is seen from one scan
// to the next; pelwarden's own claims are not taken for a worker's.
func TestScansTellAReaderThatClaimsFromPelwardensOwnClaims(t *testing.T) {
	t.Parallel()
	t.Run("a worker's claims are seen", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		ids := redistest.Hold(t, rdb, "jobs", "workers", "slow", "s", 2)
		ctx := context.Background()
		l := newLoop(t, srv.Addr())
		tg := target(t, "ghostIdleSeconds", "3600")
		_, err := l.Scan(ctx, tg)
		require.NoError(t, err)
		seen, ok := l.Readers(tg.Target.GroupRef)
		require.True(t, ok)
		require.Zero(t, seen.Claims, "one look sees no move")

		claimed, _, err := rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{Stream: "jobs", Group: "workers", Consumer: "reader", Start: "0-0", Count: 10}).Result()
		require.NoError(t, err)
		require.Equal(t, ids, claimed)
		// JUSTID keeps the count; a reader that claims to work reads the
		// entry, which counts a delivery.
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "reader", Messages: ids}).Err())
		_, err = l.Scan(ctx, tg)
		require.NoError(t, err)
		seen, _ = l.Readers(tg.Target.GroupRef)
		require.Equal(t, int64(2), seen.Claims)
		require.Equal(t, "slow", seen.Last.From)
		require.Equal(t, "reader", seen.Last.To)
		require.Equal(t, int64(2), seen.Last.Deliveries)
	})
	t.Run("pelwarden's own claims are not", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		redistest.Hold(t, rdb, "jobs", "workers", "ghost", "g", 3)
		time.Sleep(300 * time.Millisecond) // the ghost idles past ghostIdleSeconds
		redistest.Hold(t, rdb, "jobs", "workers", "live", "l", 1)
		l := newLoop(t, srv.Addr())
		tg := target(t, "reclaim", "claim")
		ctx := context.Background()
		rep, err := l.Scan(ctx, tg)
		require.NoError(t, err)
		require.Equal(t, int64(3), rep.Counts()[redisx.Claimed])
		_, err = l.Scan(ctx, tg)
		require.NoError(t, err)
		seen, ok := l.Readers(tg.Target.GroupRef)
		require.True(t, ok)
		require.Zero(t, seen.Claims, "the entries moved to live, their count risen, by pelwarden")
	})
}
