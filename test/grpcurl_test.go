package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// grpcurlRun runs the grpcurl binary and returns its standard output, or
// its standard error with the exit error.
func grpcurlRun(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// grpcurlJSON runs a call and decodes its JSON answer.
func grpcurlJSON(t *testing.T, bin string, args ...string) map[string]any {
	t.Helper()
	out, errOut, err := grpcurlRun(t, bin, args...)
	require.NoError(t, err, "grpcurl %v: %s", args, errOut)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), "grpcurl printed JSON: %s", out)
	return v
}

// byName indexes a JSON list of objects by their key field.
func byName(t *testing.T, list any, key string) map[string]map[string]any {
	t.Helper()
	items, ok := list.([]any)
	require.True(t, ok, "a list: %v", list)
	out := map[string]map[string]any{}
	for _, it := range items {
		m := it.(map[string]any)
		out[m[key].(string)] = m
	}
	return out
}

// TestGrpcurlDescribesPlansAndReclaimsThroughReflection drives pelwarden
// the way an operator does: grpcurl at the version pinned in
// tools/grpcurl/go.mod, no proto files, JSON in and out. Two workers
// heartbeat; ghost-1's heartbeat is an hour old.
func TestGrpcurlDescribesPlansAndReclaimsThroughReflection(t *testing.T) {
	t.Parallel()
	grpcurl := proctest.BuildTool(t, "..", "tools/grpcurl/go.mod", "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 10)
	redistest.Read(t, rdb, "jobs", "workers", "worker-1", 3)
	redistest.Read(t, rdb, "jobs", "workers", "worker-2", 2)
	redistest.Read(t, rdb, "jobs", "workers", "ghost-1", 5)
	heartbeat(t, rdb, "hb:ghost-1", time.Now().Add(-time.Hour))
	beat, stopBeating := context.WithCancel(context.Background())
	beating := make(chan struct{})
	defer func() { stopBeating(); <-beating }()
	go func() {
		defer close(beating)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, w := range []string{"hb:worker-1", "hb:worker-2"} {
				_ = rdb.Set(beat, w, time.Now().UnixMilli(), 0).Err()
			}
			select {
			case <-beat.Done():
				return
			case <-tick.C:
			}
		}
	}()
	liveness := []string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "1"}
	// dryRun: the loop reports but leaves the ghost's entries for the test.
	p, _ := startAdmin(t, srv.Addr(), hygieneTarget(append(liveness, "entryStaleSeconds", "0.5", "dryRun", "true")...))
	md := hygieneTarget(liveness...)
	time.Sleep(1200 * time.Millisecond) // every read is older than the heartbeat max age
	v, err := metric(context.Background(), t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "the ghost's five entries are left out")
	addr := p.app.GRPCAddr()
	target := `{"target":{"stream":"jobs","group":"workers"}}`

	list, errOut, err := grpcurlRun(t, grpcurl, "-plaintext", addr, "list")
	require.NoError(t, err, errOut)
	for _, svc := range []string{"pelwarden.v1.Admin", "externalscaler.ExternalScaler", "grpc.health.v1.Health"} {
		require.Contains(t, list, svc+"\n")
	}
	desc, errOut, err := grpcurlRun(t, grpcurl, "-plaintext", addr, "describe", "pelwarden.v1.Admin")
	require.NoError(t, err, errOut)
	for _, rpc := range []string{"DescribeTarget", "ListPending", "Plan", "Reclaim", "DeleteConsumer", "Deregister", "WatchEvents"} {
		require.Contains(t, desc, "rpc "+rpc+" ")
	}

	described := grpcurlJSON(t, grpcurl, "-plaintext", "-d", target, addr, "pelwarden.v1.Admin/DescribeTarget")
	tg := described["target"].(map[string]any)
	require.Equal(t, "5", tg["livePending"], "int64 fields are JSON strings, names lowerCamelCase")
	require.Equal(t, "5", tg["ghostPending"])
	consumers := byName(t, tg["consumers"], "name")
	require.Equal(t, "VERDICT_GHOST", consumers["ghost-1"]["verdict"])
	require.Equal(t, "5", consumers["ghost-1"]["pending"])
	require.Equal(t, "VERDICT_ALIVE", consumers["worker-1"]["verdict"])
	require.Equal(t, "3", consumers["worker-1"]["pending"])
	// Its age, or no field where the heartbeat is 0 ms old (protojson
	// leaves a zero out); -1 would be no heartbeat read.
	require.NotEqual(t, "-1", consumers["worker-2"]["heartbeatAgeMs"], "worker-2's heartbeat was read")
	require.Contains(t, described["hygiene"], "dryRun=true")
	metrics := byName(t, described["metrics"], "metric")
	require.Equal(t, "5", metrics["pendingEntriesCount"]["value"])

	plan := grpcurlJSON(t, grpcurl, "-plaintext", "-d", target, addr, "pelwarden.v1.Admin/Plan")
	steps := byName(t, plan["steps"], "consumer")
	require.Equal(t, "requeue", steps["ghost-1"]["action"])
	require.Equal(t, "5", steps["ghost-1"]["entries"])
	require.Equal(t, "VERDICT_GHOST", steps["ghost-1"]["verdict"])
	require.Contains(t, steps["ghost-1"]["reason"], "heartbeat")
	require.Equal(t, "none", steps["worker-1"]["action"])

	reclaim := `{"target":{"stream":"jobs","group":"workers"},"consumer":"ghost-1"}`
	_, errOut, err = grpcurlRun(t, grpcurl, "-plaintext", "-d", reclaim, addr, "pelwarden.v1.Admin/Reclaim")
	require.Error(t, err, "a mutating call without the token fails")
	require.Contains(t, errOut, "Code: Unauthenticated")
	done := grpcurlJSON(t, grpcurl, "-plaintext", "-H", "authorization: Bearer "+adminToken, "-d", reclaim, addr, "pelwarden.v1.Admin/Reclaim")
	require.Equal(t, map[string]any{"requeued": "5"}, done["counts"])
	require.Empty(t, pendingIDs(t, rdb, "ghost-1"))
}
