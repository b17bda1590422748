package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// cannedAdmin answers the Admin API with fixed responses, so the CLI's
// output can be compared byte for byte. It records what it was sent.
type cannedAdmin struct {
	pelwardenv1.UnimplementedAdminServer

	mu       sync.Mutex
	auth     []string
	reclaims []*pelwardenv1.ReclaimRequest
	// redisDown makes ListTargets answer as pelwarden does while Redis
	// is down: the last good numbers, with the read's error.
	redisDown bool
}

func (c *cannedAdmin) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth = append(c.auth, md.Get("authorization")...)
}

var cannedTarget = &pelwardenv1.Target{
	Redis: "default", Stream: "jobs", Group: "workers", Liveness: "heartbeat|5m0s|hb:{consumer}|30s|exact",
	LivePending: 12, GhostPending: 40, UnknownPending: 2, DegradedPending: 5, Lag: 7, SnapshotAgeMs: 850,
	Consumers: []*pelwardenv1.Consumer{
		{Name: "worker-0", Owner: "worker-0", Verdict: pelwardenv1.Verdict_VERDICT_ALIVE, Pending: 10, IdleMs: 120, InactiveMs: -1, HeartbeatAgeMs: 2300,
			Reasons: []string{"idle: last read attempt (120ms)", "heartbeat: fresh heartbeat at hb:worker-0 (2.3s)"}},
		{Name: "worker-1", Owner: "worker-1", Verdict: pelwardenv1.Verdict_VERDICT_GHOST, Pending: 40, IdleMs: 754000, InactiveMs: -1, HeartbeatAgeMs: 751000,
			Reasons: []string{"idle: last read attempt (12m34s)", "heartbeat: heartbeat at hb:worker-1 older than max age 30s (12m31s)"}},
		{Name: "worker-2", Verdict: pelwardenv1.Verdict_VERDICT_UNKNOWN, Pending: 2, IdleMs: 61000, InactiveMs: -1, HeartbeatAgeMs: -1,
			Reasons: []string{"idle: last read attempt (1m1s)", "heartbeat: heartbeat unreadable: WRONGTYPE"}},
		{Name: "worker-3", Owner: "worker-3", Verdict: pelwardenv1.Verdict_VERDICT_DEGRADED, Pending: 5, IdleMs: 300, InactiveMs: -1, HeartbeatAgeMs: 800,
			Reasons: []string{"idle: last read attempt (300ms)", "heartbeat: fresh heartbeat at hb:worker-3 says degraded (quota_exhausted_until_2026-05-16T12:00:00Z) (800ms)"}},
	},
}

func (c *cannedAdmin) ListTargets(ctx context.Context, _ *pelwardenv1.ListTargetsRequest) (*pelwardenv1.ListTargetsResponse, error) {
	c.record(ctx)
	missing := &pelwardenv1.Target{Redis: "orders", Stream: "orders", Group: "billing", Liveness: "idle|5m0s||30s|exact", GroupMissing: true}
	typo := &pelwardenv1.Target{Redis: "default", Stream: "mail", Group: "senders", Liveness: "heartbeat|5m0s|beat:{consumer}|30s|exact|startGrace|30s",
		LivePending: 3, UnknownPending: 3, NoHeartbeatRecords: true, Consumers: []*pelwardenv1.Consumer{
			{Name: "sender-0", Owner: "sender-0", Verdict: pelwardenv1.Verdict_VERDICT_UNKNOWN, Pending: 3, IdleMs: 90, InactiveMs: -1, HeartbeatAgeMs: -1,
				Reasons: []string{"idle: last read attempt (90ms)", "heartbeat: no heartbeat at beat:sender-0", "heartbeat: no consumer of the group has a heartbeat record"}},
		}}
	c.mu.Lock()
	redisDown := c.redisDown
	c.mu.Unlock()
	if redisDown {
		down := proto.Clone(cannedTarget).(*pelwardenv1.Target)
		down.Error, down.SnapshotAgeMs = "dial tcp 10.0.0.7:6379: connect: connection refused", 42_000
		return &pelwardenv1.ListTargetsResponse{Targets: []*pelwardenv1.Target{down, missing}}, nil
	}
	return &pelwardenv1.ListTargetsResponse{Targets: []*pelwardenv1.Target{cannedTarget, typo, missing}}, nil
}

// cannedFindings has a long detail, and a count of entries the ids do
// not list.
var cannedFindings = []*pelwardenv1.Finding{
	{Kind: pelwardenv1.FindingKind_FINDING_KIND_IDLE_UNDECIDED, Target: &pelwardenv1.TargetRef{Redis: "default", Stream: "jobs", Group: "workers"},
		Consumer: "worker-2", Entries: 8, Detail: "the consumer holds 8 entries and only its idle time could judge it, but this Redis (before 7.2) " +
			"counts idle from the last read that delivered entries: a worker that polls an empty stream while it works on what it holds " +
			"ages exactly like a dead one. The consumer is Unknown: its entries are counted as live and never taken."},
	{Kind: pelwardenv1.FindingKind_FINDING_KIND_TOMBSTONE, Target: &pelwardenv1.TargetRef{Redis: "default", Stream: "jobs", Group: "workers"},
		Consumer: "worker-1", Entries: 2, Ids: []string{"1-0", "2-0"}, Detail: "2 pending entries whose stream entry was deleted"},
	{Kind: pelwardenv1.FindingKind_FINDING_KIND_NULL_LAG, Target: &pelwardenv1.TargetRef{Redis: "default", Stream: "jobs", Group: "workers"},
		Detail: "XINFO GROUPS reports the lag as NULL"},
}

func (c *cannedAdmin) Findings(ctx context.Context, _ *pelwardenv1.FindingsRequest) (*pelwardenv1.FindingsResponse, error) {
	c.record(ctx)
	return &pelwardenv1.FindingsResponse{Findings: cannedFindings}, nil
}

func (c *cannedAdmin) DescribeTarget(ctx context.Context, req *pelwardenv1.DescribeTargetRequest) (*pelwardenv1.DescribeTargetResponse, error) {
	c.record(ctx)
	if req.GetTarget().GetStream() != "jobs" {
		return nil, status.Error(codes.NotFound, "no target default/"+req.GetTarget().GetStream()+"/"+req.GetTarget().GetGroup())
	}
	return &pelwardenv1.DescribeTargetResponse{Target: cannedTarget, Hygiene: cannedSettings, HygieneSources: cannedSources,
		HygieneTriggers:   []string{"trigger jobs/careful", "trigger jobs/eager"},
		HygieneActsFromMs: 1_800_000_060_000,
		HygieneWarmUp:     "trigger jobs/eager joined at 2027-01-15T08:00:00Z: every trigger of the group polls within triggers.warmUp (1m0s) before it acts",
		RefusedTriggers: []*pelwardenv1.TriggerRefusal{{Trigger: "trigger intruder/so", Code: "PermissionDenied", Key: "stream",
			Message: `namespace "intruder" may not enroll stream "jobs" of connection "default" in hygiene: no triggers.rules entry's hygieneStreams matches it`}},
	}, nil
}

const cannedSettings = "requeue|60s|0s|0||pelwarden-deliveries|false|false|requeue|false"

var cannedSources = []*pelwardenv1.SettingSource{
	{Setting: "entryStaleSeconds", Value: "60", Source: "trigger jobs/careful"},
	{Setting: "maxDeliveries", Value: "0", Source: "trigger jobs/eager"},
	{Setting: "deleteGhostConsumers", Value: "false", Source: "trigger jobs/careful"},
}

func (c *cannedAdmin) Plan(ctx context.Context, req *pelwardenv1.PlanRequest) (*pelwardenv1.PlanResponse, error) {
	c.record(ctx)
	res := &pelwardenv1.PlanResponse{Target: cannedTarget, Hygiene: "requeue|30s|0s|5|jobs:dead|pelwarden-deliveries|true|false|requeue|false", HygieneSources: cannedSources}
	switch req.GetTarget().GetStream() {
	case "orders":
		return &pelwardenv1.PlanResponse{Target: &pelwardenv1.Target{Redis: "orders", Stream: "orders", Group: "billing", GroupMissing: true}}, nil
	case "mail":
		return &pelwardenv1.PlanResponse{Target: &pelwardenv1.Target{Redis: "default", Stream: "mail", Group: "senders", NoHeartbeatRecords: true},
			Hygiene: "requeue|30s|0s|0||pelwarden-deliveries|true|false|requeue|false",
			Steps: []*pelwardenv1.PlanStep{{Consumer: "sender-0", Verdict: pelwardenv1.Verdict_VERDICT_UNKNOWN, Action: "none",
				Reason: "liveness is Unknown (heartbeat: no consumer of the group has a heartbeat record): hygiene never acts on it"}}}, nil
	}
	res.Steps = []*pelwardenv1.PlanStep{
		{Consumer: "worker-0", Verdict: pelwardenv1.Verdict_VERDICT_ALIVE, Action: "none", Reason: "owner is alive and no hard timeout is set"},
		{Consumer: "worker-1", Verdict: pelwardenv1.Verdict_VERDICT_GHOST, Action: "requeue", Entries: 40, DeadLetterEntries: 3, Reason: "owner is a ghost"},
		{Consumer: "worker-2", Verdict: pelwardenv1.Verdict_VERDICT_UNKNOWN, Action: "none", Reason: "owner liveness is Unknown"},
		{Consumer: "worker-3", Verdict: pelwardenv1.Verdict_VERDICT_DEGRADED, Action: "requeue", Entries: 5, Reason: "degraded (heartbeat: fresh heartbeat at hb:worker-3 says degraded): its stale entries are given back"},
		{Consumer: "worker-9", Verdict: pelwardenv1.Verdict_VERDICT_GHOST, Action: "delete-consumer", Reason: "ghost with an empty PEL"},
	}
	return res, nil
}

func (c *cannedAdmin) Reclaim(ctx context.Context, req *pelwardenv1.ReclaimRequest) (*pelwardenv1.ReclaimResponse, error) {
	c.record(ctx)
	c.mu.Lock()
	c.reclaims = append(c.reclaims, req)
	c.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	if auth := md.Get("authorization"); !req.GetDryRun() && (len(auth) != 1 || auth[0] != "Bearer s3cret") {
		return nil, status.Error(codes.Unauthenticated, "Reclaim needs a bearer token or an allowed client certificate")
	}
	if req.GetConsumer() == "worker-0" {
		return &pelwardenv1.ReclaimResponse{Counts: map[string]int64{}, DryRun: req.GetDryRun(),
			Note: `no pending entry of consumer "worker-0" has been idle at least 30s (entryStaleSeconds, as force asks); younger entries are left with it`}, nil
	}
	return &pelwardenv1.ReclaimResponse{Counts: map[string]int64{"requeued": 1, "not-pending": 1},
		Outcomes: []*pelwardenv1.EntryOutcome{{Id: "1-0", Outcome: "requeued", Detail: "9-0"}, {Id: "2-0", Outcome: "not-pending"}}}, nil
}

func (c *cannedAdmin) setRedisDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.redisDown = down
}

func startCanned(t *testing.T) (*cannedAdmin, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	c := &cannedAdmin{}
	pelwardenv1.RegisterAdminServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o600))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/pelwarden -update to write %s", path)
	require.Equal(t, string(want), got, "output differs from %s", path)
}

func runAdmin(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return runCLI(t, env, nil, args...)
}

func TestStatusAndPlanOutputMatchTheGoldenFiles(t *testing.T) {
	t.Parallel()
	_, addr := startCanned(t)
	cases := map[string][]string{
		"status":                {"status", "--server", addr},
		"status-wide":           {"status", "--server", addr, "-o", "wide"},
		"status-target":         {"status", "--server", addr, "--stream", "jobs", "--group", "workers"},
		"status-json":           {"status", "--server", addr, "-o", "json"},
		"plan":                  {"plan", "--server", addr},
		"plan-wide":             {"plan", "--server", addr, "-o", "wide"},
		"plan-target-json":      {"plan", "--server", addr, "--stream", "jobs", "--group", "workers", "-o", "json"},
		"plan-yaml":             {"plan", "--server", addr, "-o", "yaml"},
		"reclaim-with-token":    {"reclaim", "--server", addr, "--stream", "jobs", "--group", "workers", "--id", "1-0,2-0"},
		"reclaim-nothing-taken": {"reclaim", "--server", addr, "--stream", "jobs", "--group", "workers", "--consumer", "worker-0", "--force", "--dry-run"},
		"findings":              {"findings", "--server", addr},
		"findings-wide":         {"findings", "--server", addr, "-o", "wide"},
		"findings-yaml":         {"findings", "--server", addr, "-o", "yaml"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runAdmin(t, map[string]string{envToken: "s3cret"}, args...)
			require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
			require.Empty(t, r.stderr)
			golden(t, name, r.stdout)
		})
	}
}

func TestAdminCommandsSendTheTokenFromTheFile(t *testing.T) {
	t.Parallel()
	canned, addr := startCanned(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600))
	r := runAdmin(t, nil, "reclaim", "--server", addr, "--stream", "jobs", "--group", "workers", "--consumer", "worker-1", "--dry-run", "--token-file", tokenFile)
	require.Equal(t, exitOK, r.code, r.stderr)
	canned.mu.Lock()
	defer canned.mu.Unlock()
	require.Equal(t, []string{"Bearer s3cret"}, canned.auth, "the file's token, trimmed, as a bearer token")
	require.Len(t, canned.reclaims, 1)
	require.Equal(t, "worker-1", canned.reclaims[0].GetConsumer())
	require.True(t, canned.reclaims[0].GetDryRun())
	require.Equal(t, "requeue", canned.reclaims[0].GetMode())
}

func TestAdminCommandErrors(t *testing.T) {
	t.Parallel()
	_, addr := startCanned(t)
	cases := map[string]struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		"refused without a token": {
			args: []string{"reclaim", "--server", addr, "--stream", "jobs", "--group", "workers", "--consumer", "w"}, wantCode: exitFailure,
			wantStderr: "pelwarden: Unauthenticated: Reclaim needs a bearer token",
		},
		"unknown target": {
			args: []string{"status", "--server", addr, "--stream", "nope", "--group", "g"}, wantCode: exitFailure,
			wantStderr: "pelwarden: NotFound: no target default/nope/g",
		},
		"reclaim needs a selector": {
			args: []string{"reclaim", "--server", addr, "--stream", "jobs", "--group", "workers"}, wantCode: exitUsage,
			wantStderr: "exactly one of --consumer and --id is required",
		},
		"reclaim needs a target": {
			args: []string{"reclaim", "--server", addr, "--consumer", "w"}, wantCode: exitUsage,
			wantStderr: "--stream and --group are required",
		},
		"bad output format": {
			args: []string{"status", "--server", addr, "-o", "xml"}, wantCode: exitUsage,
			wantStderr: `--output must be table, wide, json or yaml, got "xml"`,
		},
		"deregister needs a consumer": {
			args: []string{"deregister", "--server", addr, "--stream", "jobs", "--group", "workers"}, wantCode: exitUsage,
			wantStderr: "--consumer is required",
		},
		"unreadable token file": {
			args: []string{"status", "--server", addr, "--token-file", "/nonexistent/token"}, wantCode: exitUsage,
			wantStderr: "--token-file",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := execute(tc.args, func(string) (string, bool) { return "", false }, &out, &errOut, nil)
			require.Equal(t, tc.wantCode, code, "stderr: %s", errOut.String())
			require.Contains(t, errOut.String(), tc.wantStderr)
		})
	}
}

func (c *cannedAdmin) CheckTrigger(ctx context.Context, req *pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error) {
	c.record(ctx)
	md := req.GetMetadata()
	switch {
	case md["redis"] == "orders":
		return &pelwardenv1.CheckTriggerResponse{Code: "PermissionDenied", Message: `metadata "redis": namespace "` + req.GetNamespace() + `" may not reach connection "orders"`}, nil
	case md["deleteOriginal"] != "":
		return &pelwardenv1.CheckTriggerResponse{Code: "OK", AsksHygiene: true, HygieneRefusal: &pelwardenv1.TriggerRefusal{
			Code: "InvalidArgument", Key: "deleteOriginal", Message: "deletes entries: set it in hygiene.targets of pelwarden's configuration; trigger metadata may not"}}, nil
	}
	return &pelwardenv1.CheckTriggerResponse{Code: "OK", AsksHygiene: md["reclaim"] != ""}, nil
}

func TestCheckTriggerExitsOneWhenAnyPartIsRefused(t *testing.T) {
	t.Parallel()
	_, addr := startCanned(t)
	cases := map[string]struct {
		md             string
		code           int
		stdout, stderr string
	}{
		"admitted":          {md: "stream=jobs,consumerGroup=workers,reclaim=requeue", code: exitOK, stdout: "metric   served\nhygiene  admitted\n"},
		"metrics only":      {md: "stream=jobs,consumerGroup=workers", code: exitOK, stdout: "metric   served\nhygiene  not asked for\n"},
		"hygiene refused":   {md: "stream=jobs,consumerGroup=workers,reclaim=requeue,deleteOriginal=true", code: exitFailure, stdout: "hygiene  refused InvalidArgument deleteOriginal: deletes entries", stderr: "pelwarden: InvalidArgument: hygiene refused, key deleteOriginal: deletes entries"},
		"connection denied": {md: "redis=orders,stream=jobs,consumerGroup=workers", code: exitFailure, stdout: "metric   refused PermissionDenied", stderr: "pelwarden: PermissionDenied: metadata \"redis\""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"check-trigger", "--server", addr, "--namespace", "jobs"}
			for _, pair := range strings.Split(tc.md, ",") {
				args = append(args, "--metadata", pair)
			}
			r := runAdmin(t, nil, args...)
			require.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stdout, tc.stdout)
			if tc.stderr == "" {
				require.Empty(t, r.stderr)
			} else {
				require.Contains(t, r.stderr, tc.stderr)
			}
		})
	}
	r := runAdmin(t, nil, "check-trigger", "--server", addr)
	require.Equal(t, exitUsage, r.code, "--metadata is required")
}
