package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// TestUnreadableHeartbeatIsUnknownAndCountedAsLive: a heartbeat read that
// fails (here the key holds a hash) must never make a consumer a ghost.
func TestUnreadableHeartbeatIsUnknownAndCountedAsLive(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	newGroup(t, rdb, "jobs", "workers")
	addEntries(t, rdb, "jobs", 7)
	readAs(t, rdb, "jobs", "workers", "broken", 3)
	readAs(t, rdb, "jobs", "workers", "dead", 4)
	require.NoError(t, rdb.HSet(ctx, "hb:broken", "at", "now").Err())
	heartbeat(t, rdb, "hb:dead", time.Now().Add(-time.Hour))
	time.Sleep(1100 * time.Millisecond)

	p := startPelwarden(t, srv.Addr(), nil)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}
	v, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(3), v, "the Unknown consumer's entries count as live; the ghost's do not")

	admin := pelwardenv1.NewAdminClient(p.conn)
	res, err := admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err)
	require.Len(t, res.GetTargets(), 1)
	tg := res.GetTargets()[0]
	require.Equal(t, int64(3), tg.GetUnknownPending())
	require.Equal(t, int64(4), tg.GetGhostPending())
	verdicts := map[string]pelwardenv1.Verdict{}
	for _, c := range tg.GetConsumers() {
		verdicts[c.GetName()] = c.GetVerdict()
		require.NotEmpty(t, c.GetReasons(), "consumer %s has reasons", c.GetName())
		if c.GetName() == "broken" {
			require.Contains(t, strings.Join(c.GetReasons(), "; "), "WRONGTYPE")
		}
	}
	require.Equal(t, map[string]pelwardenv1.Verdict{"broken": pelwardenv1.Verdict_VERDICT_UNKNOWN, "dead": pelwardenv1.Verdict_VERDICT_GHOST}, verdicts)

	metrics := scrape(t, p.app.HTTPAddr())
	for _, line := range []string{
		`pelwarden_ghost_pending_entries{group="workers",redis="default",stream="jobs"} 4`,
		`pelwarden_unknown_pending_entries{group="workers",redis="default",stream="jobs"} 3`,
		`pelwarden_live_pending_entries{group="workers",redis="default",stream="jobs"} 3`,
		`pelwarden_ghost_consumers{group="workers",redis="default",stream="jobs"} 1`,
		`pelwarden_scaler_reported_value{group="workers",metric="pendingEntriesCount",redis="default",stream="jobs"} 3`,
		`pelwarden_scaler_target_value{group="workers",metric="pendingEntriesCount",redis="default",stream="jobs"} 5`,
		`pelwarden_shared_consumer_names{group="workers",redis="default",stream="jobs"} 0`,
	} {
		require.Contains(t, metrics, line)
	}
}

// TestNullLagFallsBackToACountedEstimate: an XDEL inside the unread range
// makes XINFO GROUPS answer a NULL lag; pelwarden counts the entries after
// last-delivered-id instead, and says so.
func TestNullLagFallsBackToACountedEstimate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	addEntries(t, rdb, "jobs", 6)
	require.NoError(t, rdb.XGroupCreate(ctx, "jobs", "workers", "0").Err())
	entries, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, "jobs", entries[2].ID).Err())
	groups, err := rdb.XInfoGroups(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(-1), groups[0].Lag, "precondition: Redis answers a NULL lag")

	p := startPelwarden(t, srv.Addr(), nil)
	v, err := metric(ctx, t, p.client, map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "1"})
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "six added, one deleted, none delivered")
	require.Contains(t, scrape(t, p.app.HTTPAddr()), `pelwarden_lag_estimated{group="workers",redis="default",stream="jobs"} 1`)
}

// TestReadinessFollowsRedis: /readyz and the scaler's gRPC health go down
// with Redis and come back with it; /healthz stays up.
func TestReadinessFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startPelwarden(t, srv.Addr(), nil)
	status := func(path string) int {
		resp, err := http.Get("http://" + p.app.HTTPAddr() + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, 5*time.Second, func() error { return wantStatus(status("/readyz"), http.StatusOK) })
	srv.Kill()
	eventually(t, 15*time.Second, func() error { return wantStatus(status("/readyz"), http.StatusServiceUnavailable) })
	require.Equal(t, http.StatusOK, status("/healthz"), "liveness does not follow Redis")
	srv.Restart(t)
	eventually(t, 15*time.Second, func() error { return wantStatus(status("/readyz"), http.StatusOK) })
}

func wantStatus(got, want int) error {
	if got != want {
		return fmt.Errorf("status %d, want %d", got, want)
	}
	return nil
}
