package reclaim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// lockedBuffer is a log sink the test reads while the engine writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// deadLetteredLines are the "entry dead-lettered" log lines, by entry id.
func (b *lockedBuffer) deadLetteredLines(t *testing.T) map[string]map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		if line["msg"] == "entry dead-lettered" {
			out[line["id"].(string)] = line
		}
	}
	return out
}

// TestTwoStepRecordAndLogLineNameTheDeliveriesAndTheConsumer: on a real
// cluster, with the dead-letter stream in another slot, each record of an
// entry delivered three times says 3 and names the ghost it was taken
// from, as the one-script path's record does, and so does its log line;
// also when a crash after step 2 leaves the holder to finish.
func TestTwoStepRecordAndLogLineNameTheDeliveriesAndTheConsumer(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := cl.Client(t)
	view := liveness.NewView(nil, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})

	for name, crash := range map[string]func(t *testing.T, engine *Engine, job Job){
		"no crash": nil,
		"a crash after step 2": func(t *testing.T, engine *Engine, job Job) {
			_, err := redisx.RunReclaim(t.Context(), rdb, engine.batch(job, ghostStep(job, 4)[0], nil, ""))
			require.NoError(t, err)
			h := engine.heldBatch(job, "ghost", nil, "")
			entries, err := redisx.ReadHeld(t.Context(), rdb, h)
			require.NoError(t, err)
			for _, e := range entries {
				_, err := redisx.AddRecord(t.Context(), rdb, h, e)
				require.NoError(t, err)
			}
			held := rdb.XPending(t.Context(), job.Target.Stream, "workers").Val().Consumers[liveness.DeadLetterHolder]
			_, err = engine.RunAll(t.Context(), job, holderStep(job, held))
			require.NoError(t, err)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			logs := &lockedBuffer{}
			engine, err := New(Options{View: view, BatchSize: 2, Log: slog.New(slog.NewJSONHandler(logs, nil))}, prometheus.NewRegistry())
			require.NoError(t, err)
			stream := "counted-" + name
			dead := onAnotherMaster(t, cl, "dead-"+stream, stream)
			job := clusterJob(rdb, stream, dead)
			job.Hygiene.MaxDeliveries = 3
			ids := redistest.Hold(t, rdb, stream, "workers", "ghost", "", 4)
			deliverAgain(t, rdb, stream, ids, 2)
			time.Sleep(60 * time.Millisecond)

			if crash != nil {
				crash(t, engine, job)
			}
			_, err = engine.RunAll(t.Context(), job, ghostStep(job, 4))
			require.NoError(t, err)

			requireOneRecordEach(t, rdb, stream, dead, ids)
			recs, err := rdb.XRange(t.Context(), dead, "-", "+").Result()
			require.NoError(t, err)
			lines := logs.deadLetteredLines(t)
			for _, r := range recs {
				id := r.Values[redisx.FieldOriginID].(string)
				require.Equal(t, "3", r.Values[redisx.FieldDeliveries], "record of %s: its three deliveries", id)
				require.Equal(t, "ghost", r.Values[redisx.FieldConsumer], "record of %s: the consumer it was taken from", id)
				line, ok := lines[id]
				require.True(t, ok, "a log line for %s", id)
				require.InDelta(t, 3, line["deliveries"], 0, "log line of %s: the record's delivery count", id)
				require.Contains(t, []any{line["consumer"], line["from"]}, "ghost", "log line of %s: the ghost it was taken from", id)
			}
		})
	}
}

// deliverAgain has the ghost's entries delivered n more times, as XCLAIM
// counts a delivery.
func deliverAgain(t *testing.T, rdb redis.UniversalClient, stream string, ids []string, n int) {
	t.Helper()
	for range n {
		args := []any{"XCLAIM", stream, "workers", "ghost", 0}
		for _, id := range ids {
			args = append(args, id)
		}
		require.NoError(t, rdb.Do(t.Context(), args...).Err())
	}
}
