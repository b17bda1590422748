package reclaim

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestAStepWhoseWritesRedisRefusesStopsAndLogsNothing: Redis refuses
// writes while a ghost's entries are requeued. The script catches each
// write's error and leaves every entry untouched; the step stops at that
// batch with a *redisx.WritesRefused, tells the connection, and logs no
// line per entry; the next run is not even tried.
func TestAStepWhoseWritesRedisRefusesStopsAndLogsNothing(t *testing.T) {
	t.Parallel()
	for _, f := range redistest.Faults {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			g := newGroup(t, redistest.FaultOptions(t, f))
			if ok, why := g.srv.CanCause(t, f); !ok {
				t.Skipf("%s cannot cause %s: %s", g.srv.Version(t), f, why)
			}
			redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 7)
			time.Sleep(60 * time.Millisecond)
			snap := g.snapshot(t, map[string]liveness.Verdict{"ghost": liveness.Ghost})
			h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 50 * time.Millisecond}
			steps := Decide(snap, h, time.Now())
			view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
			var logs bytes.Buffer
			engine, err := New(Options{View: view, BatchSize: 3, Writes: g.conns, Log: slog.New(slog.NewTextHandler(&logs, nil))}, prometheus.NewRegistry())
			require.NoError(t, err)
			job := Job{Client: g.rdb, Target: g.target, Hygiene: h, Source: events.SourceHygiene}
			before := g.state(t)

			g.srv.Cause(t, f)
			_, err = engine.RunAll(context.Background(), job, steps)
			var refused *redisx.WritesRefused
			require.ErrorAs(t, err, &refused, "the step stops on the refusal")
			require.Equal(t, f.String(), refused.Refusal.String())
			require.Equal(t, before, g.state(t), "nothing changed")
			require.NotContains(t, logs.String(), "level=ERROR", "no line per entry")
			require.NotNil(t, g.conns.WritesRefused(context.Background(), "default", "jobs"), "the connection knows")

			calls := redistest.CommandCalls(t, g.rdb)
			_, err = engine.RunAll(context.Background(), job, steps)
			require.ErrorAs(t, err, &refused)
			after := redistest.CommandCalls(t, g.rdb)
			require.Equal(t, calls["evalsha"], after["evalsha"], "a step on a node refusing writes is not sent")
		})
	}
}
