//go:build redisnext

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/kedatest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// envKEDAOracle names the directory holding KEDA's scaler code as a
// binary, keda-oracle (or keda-oracle.gz), as ../shared/keda/bin keeps it:
// make test-redis-next sets it from KEDA_BIN.
const envKEDAOracle = "PELWARDEN_KEDA_BIN"

// kedaPoll is one poll by KEDA v2.21's own scaler code.
type kedaPoll struct {
	Metric float64 `json:"metric"`
	Active bool    `json:"active"`
	Error  string  `json:"error"`
}

// kedaOracle is the keda-oracle binary, written out of its gzip where
// needed. It fails, never skips, without one.
func kedaOracle(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envKEDAOracle)
	require.NotEmpty(t, dir, "%s is not set: run make test-redis-next REDIS_NEXT_SERVER=<redis-server> KEDA_BIN=<dir with keda-oracle.gz>", envKEDAOracle)
	if plain := filepath.Join(dir, "keda-oracle"); fileOK(plain) {
		return plain
	}
	in, err := os.Open(filepath.Join(dir, "keda-oracle.gz"))
	require.NoError(t, err, "%s=%s holds neither keda-oracle nor keda-oracle.gz", envKEDAOracle, dir)
	defer in.Close()
	zr, err := gzip.NewReader(in)
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "keda-oracle")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o700)
	require.NoError(t, err)
	_, err = io.Copy(out, zr)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	return bin
}

func fileOK(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// askKEDA polls one trigger of type typ with metadata md as KEDA would,
// and returns its metric, a whole number of entries.
func askKEDA(ctx context.Context, t *testing.T, oracle, typ string, md map[string]string) int64 {
	t.Helper()
	meta, err := json.Marshal(md)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, oracle, "-type", typ, "-meta", string(meta), "-timeout", "3s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "keda-oracle: %s", stderr.String())
	var a kedaPoll
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &a), stdout.String())
	require.Empty(t, a.Error, "KEDA's answer to %v", md)
	n := int64(a.Metric)
	require.InDelta(t, a.Metric, float64(n), 0, "KEDA counts whole entries")
	return n
}

// A live worker releases 5 of the 8 entries it holds (XNACK), as it does on
// a graceful shutdown, and 2 entries wait unread: KEDA's built-in scaler
// counts the released entries as pending, and so does pelwarden, through
// KEDA's own external-scaler client too; with a ghost holding more,
// pelwarden's count is KEDA's less the ghost's. DescribeTarget shows them.
func TestReleasedEntriesAreCountedAsKEDACountsThemOnRedis8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{}, redistest.XNack)
	oracle := kedaOracle(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "w1", "", 8)
	redistest.AddJobs(t, rdb, "jobs", "unread-", 2)
	redistest.Nack(t, rdb, "jobs", "workers", "SILENT", ids[:5]...)
	beatEvery(t, rdb, map[string]func() string{"hb:w1": func() string { return fmt.Sprint(time.Now().UnixMilli()) }})
	p := startPelwarden(t, srv.Addr(), nil)

	ours := func(metricKey string) int64 {
		md := map[string]string{"stream": "jobs", "consumerGroup": "workers", metricKey: "5",
			"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "2"}
		v, _, err := kedatest.Poll(ctx, p.client, ref(md))
		require.NoError(t, err)
		through := askKEDA(ctx, t, oracle, "external", map[string]string{"scalerAddress": p.app.GRPCAddr(), "stream": "jobs", "consumerGroup": "workers",
			metricKey: "5", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "2"})
		require.Equal(t, v, through, "KEDA's external-scaler client reads what pelwarden answers")
		return v
	}
	builtin := func(metricKey string) int64 {
		return askKEDA(ctx, t, oracle, "redis-streams", map[string]string{"address": srv.Addr(), "stream": "jobs", "consumerGroup": "workers", metricKey: "5"})
	}

	// No ghost: KEDA's numbers exactly.
	require.Equal(t, builtin("pendingEntriesCount"), ours("pendingEntriesCount"), "pendingEntriesCount with released entries")
	require.Equal(t, builtin("lagCount"), ours("lagCount"), "lagCount")
	require.Equal(t, ours("lagCount")+ours("pendingEntriesCount"), ours("backlogCount"), "backlogCount is lag plus pending, released included")

	admin := pelwardenv1.NewAdminClient(p.conn)
	d, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Equal(t, int64(5), d.GetTarget().GetReleasedPending())
	require.Equal(t, int64(3), d.GetTarget().GetLivePending())

	// A ghost: a worker that read 4 more entries and whose heartbeat
	// stopped an hour ago.
	redistest.AddJobs(t, rdb, "jobs", "late-", 4)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 6)
	heartbeat(t, rdb, "hb:ghost", time.Now().Add(-time.Hour))
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	ghostHeld := pending.Consumers["ghost"]
	require.Positive(t, ghostHeld)
	eventually(t, 5*time.Second, func() error {
		d, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err != nil {
			return err
		}
		if g := d.GetTarget().GetGhostPending(); g != ghostHeld {
			return fmt.Errorf("the ghost holds %d, pelwarden's read says %d", ghostHeld, g)
		}
		return nil
	})
	// The scaler answers from reads up to scaler.freshness old: past it,
	// each is newer than the ghost.
	time.Sleep(2 * testConfig("").Scaler.Freshness)
	require.Equal(t, builtin("pendingEntriesCount")-ghostHeld, ours("pendingEntriesCount"),
		"pendingEntriesCount: KEDA's count less the %d entries the ghost holds", ghostHeld)
	require.Equal(t, builtin("lagCount"), ours("lagCount"), "lagCount")
}
