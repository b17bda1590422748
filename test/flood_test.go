package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// logLines keeps what pelwarden logs, line by line, in a file: a test
// that measures the heap does not measure its own log buffer.
type logLines struct {
	mu sync.Mutex
	f  *os.File
}

func newLogLines(t *testing.T) *logLines {
	f, err := os.Create(filepath.Join(t.TempDir(), "pelwarden.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return &logLines{f: f}
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	text, err := os.ReadFile(l.f.Name())
	if err != nil {
		panic(err) // the test's own temporary file
	}
	return strings.Split(strings.TrimSpace(string(text)), "\n")
}

// heapAfterGC is the live heap of the test process, pelwarden's included:
// the least of a few readings, each after a full collection. pelwarden's
// goroutines allocate between a collection and its reading, more so on a
// busy machine; that error only ever adds, so the least reading is the
// closest.
func heapAfterGC() uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		least = min(least, m.HeapAlloc)
		time.Sleep(10 * time.Millisecond)
	}
	return least
}

// TestAFloodOfHygieneTriggersPastTheCapStaysBounded: far more distinct
// triggers asking for reclaim than hygiene.maxTargets, on streams whose
// every read fails, sent as KEDA would. The cap's worth is enrolled; the
// rest have their hygiene refused with ResourceExhausted while their
// metric is still served; goroutines, the heap, /metrics and
// the log do not grow with the refused triggers nor with time; a
// ScaledObject enrolled before the flood keeps being answered; and once
// the triggers stop, every one of their series goes.
//
// The configuration is stated in full: the trigger policy lets every
// namespace enroll every stream, with quotas above the flood, so the caps
// under test are hygiene.maxTargets and scaler.maxTargets (which bounds the
// parse cache and the triggers remembered).
func TestAFloodOfHygieneTriggersPastTheCapStaysBounded(t *testing.T) {
	// viewConcurrency is the liveness view's default bound on background
	// reads at once.
	const capacity, flood, workers, viewConcurrency = 100, 600, 4, 32
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cfg := testConfig(srv.Addr())
	cfg.Log.Level = "info"
	cfg.Hygiene.MaxTargets, cfg.Hygiene.Workers = capacity, workers
	cfg.Hygiene.ScanInterval, cfg.Hygiene.LeaseTTL = 100*time.Millisecond, time.Second
	cfg.Scaler.TargetIdleExpiry = 5 * time.Second
	cfg.Triggers.Quotas = config.TriggerQuotas{ScalerTargets: 2 * flood, HygieneTargets: 2 * flood}
	// The parse cache and the trigger registry are bounded by
	// scaler.maxTargets, less hygiene.maxTargets for the loop's own view
	// targets; below the flood, so the test sees them full.
	cfg.Scaler.MaxTargets = 4 * capacity
	cfg.Triggers.Profiles = map[string]map[string]string{"idle": {}}
	logs := newLogLines(t)
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	keda := externalscaler.NewExternalScalerClient(conn)

	trigger := func(stream string) *externalscaler.ScaledObjectRef {
		return ref(map[string]string{"stream": stream, "consumerGroup": "workers", "reclaim": "requeue", "livenessProfile": "idle"})
	}
	redistest.CreateGroup(t, rdb, "legit", "workers")
	_, err = keda.GetMetricSpec(ctx, trigger("legit"))
	require.NoError(t, err)
	baseGoroutines := runtime.NumGoroutine()

	enroll := func(i int) error {
		stream := fmt.Sprintf("flood-%d", i)
		// A string where a stream should be: every read of it fails.
		require.NoError(t, rdb.Set(ctx, stream, "x", 0).Err())
		_, err := keda.GetMetricSpec(ctx, trigger(stream))
		return err
	}
	// KEDA polls every ScaledObject it knows; polled, the enrolled
	// triggers stay enrolled, so the cap stays full.
	pollEnrolled := func() {
		for i := range capacity - 1 {
			_, err := keda.GetMetricSpec(ctx, trigger(fmt.Sprintf("flood-%d", i)))
			require.NoError(t, err)
		}
		_, err = keda.GetMetricSpec(ctx, trigger("legit"))
		require.NoError(t, err, "a ScaledObject enrolled before the flood is still answered")
	}
	for i := range capacity - 1 {
		require.NoError(t, enroll(i), "within the cap")
	}
	time.Sleep(500 * time.Millisecond) // every enrolled target scanned and refreshed, failing, a few times
	heapAtCap, metricsAtCap := heapAfterGC(), len(scrape(t, a.HTTPAddr()))

	// Past hygiene.maxTargets a trigger's metric is served and its hygiene
	// refused; once triggers hold the scaler targets the view leaves them
	// the whole call is ResourceExhausted, until some expire.
	most, served, exhausted := 0, 0, 0
	for i := capacity - 1; i < flood; i++ {
		switch err := enroll(i); status.Code(err) {
		case codes.OK:
			served++
		case codes.ResourceExhausted:
			exhausted++
		default:
			require.NoError(t, err, "trigger %d: served, or ResourceExhausted past the triggers remembered", i)
		}
		if i%50 == 0 {
			most = max(most, runtime.NumGoroutine())
			pollEnrolled()
		}
	}
	require.GreaterOrEqual(t, served, cfg.TriggerShares().ScalerTargets-capacity, "past the hygiene cap, metrics are served up to the targets triggers may hold")
	require.Positive(t, exhausted, "past the triggers remembered, calls are refused")
	require.Contains(t, scrape(t, a.HTTPAddr()), fmt.Sprintf(`pelwarden_trigger_hygiene_refused_total{code="ResourceExhausted"} %d`, served),
		"every served trigger past the cap had its hygiene refused")
	require.Contains(t, strings.Join(logs.lines(), "\n"), "the 100 groups triggers may enroll (hygiene.maxTargets", "the refusal names the setting")
	pollEnrolled()
	linesAfterFlood := len(logs.lines())
	time.Sleep(500 * time.Millisecond) // five scan intervals with every enrolled read failing
	most = max(most, runtime.NumGoroutine())
	heapAfterFlood, metricsAfterFlood := heapAfterGC(), len(scrape(t, a.HTTPAddr()))
	idleLines := len(logs.lines()) - linesAfterFlood

	// The workers, the dispatcher and the lease keeper run from the start.
	// What comes and goes: a scan's view read per worker, and the view's
	// background reads, two goroutines each, at most viewConcurrency at
	// once. A goroutine per target would be 100 more, 600 without the cap.
	t.Logf("goroutines %d over base, heap %d -> %d, /metrics %d -> %d, idle lines %d", most-baseGoroutines, heapAtCap, heapAfterFlood, metricsAtCap, metricsAfterFlood, idleLines)
	require.LessOrEqual(t, most-baseGoroutines, 2*viewConcurrency+2*workers+4, "goroutines follow the workers, not the targets")
	require.Less(t, heapAfterFlood, heapAtCap+uint64(flood)*2048, "%d refused triggers hold no memory (heap %d -> %d)", flood, heapAtCap, heapAfterFlood)
	require.Less(t, metricsAfterFlood, metricsAtCap+4096, "/metrics holds only the cap's worth (%d -> %d bytes)", metricsAtCap, metricsAfterFlood)
	require.LessOrEqual(t, idleLines, 2, "failing targets log their first error once, not once a scan")
	require.Contains(t, strings.Join(logs.lines(), "\n"), "hygiene scan failed", "the failing scans were logged, once each")
	for i := range flood {
		named := 0
		for _, line := range logs.lines() {
			if strings.Contains(line, fmt.Sprintf("/flood-%d/", i)) {
				named++
			}
		}
		require.LessOrEqual(t, named, 3, "flood-%d: added, its first error, at most one more line", i)
		if i < capacity-1 {
			require.Positive(t, named, "flood-%d was enrolled and said so", i)
		}
	}

	// The triggers stop: after targetIdleExpiry every series of theirs goes.
	require.Eventually(t, func() bool { return !strings.Contains(scrape(t, a.HTTPAddr()), `stream="flood-`) }, 30*time.Second, 100*time.Millisecond,
		"no series of an expired target is left")
	text := scrape(t, a.HTTPAddr())
	require.NotContains(t, text, `stream="legit"`, "the legit target expired too, with no further calls")
}
