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

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// series returns the samples of one metric in a scrape, by their label set
// as the exposition writes it ({group="g",...}).
func series(body, name string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		cut := strings.LastIndex(rest, " ")
		out["{"+rest[:cut]] = rest[cut+1:]
	}
	return out
}

// livenessLabel is the liveness label of the target md asks for.
func livenessLabel(t *testing.T, md map[string]string) string {
	t.Helper()
	r, err := metadata.Parse(md, metadata.Env{Conns: []string{"default"}, Kubernetes: md["podSelector"] != ""})
	require.NoError(t, err)
	return liveness.LabelValue(r.Target.Spec.String())
}

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
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 7)
	redistest.Read(t, rdb, "jobs", "workers", "broken", 3)
	redistest.Read(t, rdb, "jobs", "workers", "dead", 4)
	require.NoError(t, rdb.HSet(ctx, "hb:broken", "at", "now").Err())
	heartbeat(t, rdb, "hb:dead", time.Now().Add(-time.Hour))
	time.Sleep(1100 * time.Millisecond)

	p := startPelwarden(t, srv.Addr(), nil)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}
	// The Unknown consumer's entries count as live; the ghost's do not,
	// once a max age has passed since pelwarden's first read.
	requireMetric(t, p, md, 3)

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
			require.Contains(t, strings.Join(c.GetReasons(), "; "), "holds a value of type hash, not a string")
		}
	}
	require.Equal(t, map[string]pelwardenv1.Verdict{"broken": pelwardenv1.Verdict_VERDICT_UNKNOWN, "dead": pelwardenv1.Verdict_VERDICT_GHOST}, verdicts)

	metrics := scrape(t, p.app.HTTPAddr())
	lv := fmt.Sprintf(`{group="workers",liveness=%q,redis="default",stream="jobs"}`, livenessLabel(t, md))
	for _, line := range []string{
		`pelwarden_ghost_pending_entries` + lv + ` 4`,
		`pelwarden_unknown_pending_entries` + lv + ` 3`,
		`pelwarden_live_pending_entries` + lv + ` 3`,
		`pelwarden_ghost_consumers` + lv + ` 1`,
		fmt.Sprintf(`pelwarden_scaler_reported_value{group="workers",liveness=%q,metric="pendingEntriesCount",redis="default",stream="jobs",target="5"} 3`, livenessLabel(t, md)),
		fmt.Sprintf(`pelwarden_scaler_target_value{group="workers",liveness=%q,metric="pendingEntriesCount",redis="default",stream="jobs",target="5"} 5`, livenessLabel(t, md)),
		`pelwarden_shared_consumer_names` + lv + ` 0`,
		`pelwarden_dead_letter_held_entries` + lv + ` 0`,
	} {
		require.Contains(t, metrics, line)
	}
}

// TestTwoTargetsOnOneGroupKeepTheirOwnSeries: two ScaledObjects judge one
// group by other liveness settings. Each target has its own series of
// judged counts, the same on every scrape; the group's lag is one series.
func TestTwoTargetsOnOneGroupKeepTheirOwnSeries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 45)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 40)
	redistest.Read(t, rdb, "jobs", "workers", "w-1", 2)
	require.NoError(t, rdb.HSet(ctx, "hb:w-0", "at", "now").Err()) // unreadable: Unknown by heartbeat
	time.Sleep(1100 * time.Millisecond)
	heartbeat(t, rdb, "hb:w-1", time.Now())

	p := startPelwarden(t, srv.Addr(), nil)
	byIdle := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "3600"}
	byHeartbeat := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "60"}
	for _, md := range []map[string]string{byIdle, byHeartbeat} {
		_, err := metric(ctx, t, p.client, md)
		require.NoError(t, err)
	}
	label := func(md map[string]string) string {
		return fmt.Sprintf(`{group="workers",liveness=%q,redis="default",stream="jobs"}`, livenessLabel(t, md))
	}
	wantUnknown := map[string]string{label(byIdle): "0", label(byHeartbeat): "40"}
	wantLive := map[string]string{label(byIdle): "42", label(byHeartbeat): "42"}
	for range 6 {
		body := scrape(t, p.app.HTTPAddr())
		require.Equal(t, wantUnknown, series(body, "pelwarden_unknown_pending_entries"),
			"one series per target, every scrape: w-0's heartbeat is unreadable, which only the heartbeat target reads")
		require.Equal(t, wantLive, series(body, "pelwarden_live_pending_entries"))
		require.Equal(t, map[string]string{`{group="workers",redis="default",stream="jobs"}`: "3"}, series(body, "pelwarden_lag_entries"),
			"the lag is the group's, one series")
		time.Sleep(100 * time.Millisecond)
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
	redistest.AddJobs(t, rdb, "jobs", "", 6)
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
