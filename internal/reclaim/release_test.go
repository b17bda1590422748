package reclaim

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// groupOn is newGroup on srv, with the connections as the engine's Servers.
func groupOn(t *testing.T, srv *redistest.Server) (group, *redisx.Conns) {
	t.Helper()
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	spec := liveness.Spec{Idle: true, GhostIdle: time.Hour}
	return group{rdb: srv.Client(t), reader: &redisx.Reader{Conns: conns, LagEstimateCap: 1000},
		target: liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: spec}}, conns
}

var releasing = policy.Hygiene{Mode: policy.ReclaimRelease, ClaimingReaders: true, EntryStale: 50 * time.Millisecond, DeleteGhostConsumers: true,
	DeliveryCountField: "pelwarden-deliveries", DeadLetterStream: "jobs:dead", MaxDeliveries: 3, ClaimFallback: policy.FallbackRequeue}

// Release mode is planned and scanned alike: the ghost's entries are
// released under their own ids, no copy is written, and a poison entry
// still goes to the dead-letter stream rather than back to the readers.
func TestReleaseModeDoesWhatItsPlanSaysAndWritesNoCopyOnRedis8(t *testing.T) {
	t.Parallel()
	g, conns := groupOn(t, redistest.StartWith(t, redistest.Options{}, redistest.XNack))
	redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 5)
	g.addCarried(t, "ghost", 2, "2")
	time.Sleep(100 * time.Millisecond) // past entryStaleSeconds
	snap := g.snapshot(t, map[string]liveness.Verdict{"ghost": liveness.Ghost})
	steps := Decide(snap, releasing, time.Now())
	view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	engine, err := New(Options{View: view, BatchSize: 3, Servers: conns}, prometheus.NewRegistry())
	require.NoError(t, err)
	job := Job{Client: g.rdb, Target: g.target, Hygiene: releasing, Source: events.SourceHygiene}

	before := g.state(t)
	plan, err := engine.RunAll(context.Background(), Job{Client: g.rdb, Target: g.target, Hygiene: releasing, Source: events.SourceAdmin, DryRun: true}, steps)
	require.NoError(t, err)
	require.Equal(t, before, g.state(t), "Plan changes nothing")
	want := map[redisx.Outcome]int64{redisx.Released: 5, redisx.DeadLettered: 2}
	require.Equal(t, want, plan.Counts())

	scan, err := engine.RunAll(context.Background(), job, steps)
	require.NoError(t, err)
	require.Equal(t, want, scan.Counts())
	after := g.state(t)
	requireRedisShows(t, before, after, scan.Counts(), false)
	require.Equal(t, 5, after.owned(""), "released: pending with no owner")
	require.Zero(t, after.owned("ghost"))
	require.Equal(t, Release, Explain(scan.Steps[0], releasing).Action)
}

// Release mode on a server without XNACK is refused before any script
// runs, naming the setting, and changes nothing; on one with it, the
// entries are released. Each server says which it is.
func TestReleaseModeIsRefusedWhereTheServerHasNoXNACK(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	g, conns := groupOn(t, srv)
	redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 4)
	time.Sleep(100 * time.Millisecond)
	snap := g.snapshot(t, map[string]liveness.Verdict{"ghost": liveness.Ghost})
	view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	engine, err := New(Options{View: view, BatchSize: 10, Servers: conns}, prometheus.NewRegistry())
	require.NoError(t, err)
	before := g.state(t)
	rep, err := engine.RunAll(context.Background(), Job{Client: g.rdb, Target: g.target, Hygiene: releasing, Source: events.SourceHygiene},
		Decide(snap, releasing, time.Now()))
	if srv.Knows(t, redistest.XNack) {
		require.NoError(t, err, "%s has XNACK", srv.Version(t))
		require.Equal(t, map[redisx.Outcome]int64{redisx.Released: 4}, rep.Counts())
		return
	}
	require.ErrorContains(t, err, "release needs XNACK", "%s", srv.Version(t))
	require.ErrorContains(t, err, "set reclaim to requeue or claim")
	require.Equal(t, map[redisx.Outcome]int64{redisx.ReleaseUnsupported: 4}, rep.Counts())
	require.Equal(t, before, g.state(t), "nothing changed")
}
