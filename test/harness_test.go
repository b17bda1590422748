// Package e2e runs pelwarden in-process against real redis-server processes
// and talks to it the way KEDA does: through KEDA's generated client.
package e2e

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// pelwarden is one running instance with a KEDA client connected to it.
type pelwarden struct {
	app    *app.App
	client externalscaler.ExternalScalerClient
	conn   *grpc.ClientConn
	stop   func()
	// logs is the tail of pelwarden's log.
	logs *tailLog
}

// testConfig is pelwarden's configuration for tests: free loopback ports,
// short intervals and one Redis connection named default.
func testConfig(redisAddr string) config.Config {
	cfg := config.Default()
	cfg.GRPC.Addr = "127.0.0.1:0"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.GRPC.ShutdownTimeout = 2 * time.Second
	cfg.Scaler.Freshness = 200 * time.Millisecond
	cfg.Scaler.RequestTimeout = time.Second
	r := config.DefaultRedis("default", redisAddr)
	r.DialTimeout, r.ReadTimeout, r.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	// The suites' ghosts are idle-only, and their workers never read while
	// they hold entries: judged by idle on Redis 7.0 too.
	r.IdleBefore72 = config.IdleGhost
	cfg.Redis = []config.Redis{r}
	// Most suites enroll groups from triggers with sub-second thresholds,
	// judged by profiles (withProfile) and acting at once; the policy tests
	// (policy_test.go) set the shipped floors and a warm-up again.
	cfg.Triggers.Reclaim = policy.ReclaimRequeue
	cfg.Triggers.Rules = []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}, HygieneStreams: []string{"*"},
		Profiles: []string{"*"}, HeartbeatKeys: []string{"*"}}}
	cfg.Triggers.Floors = config.TriggerFloors{EntryStale: time.Millisecond, GhostIdle: time.Millisecond, HeartbeatMaxAge: time.Millisecond,
		PodDeletionGrace: time.Millisecond, MaxDeliveries: 1}
	cfg.Triggers.WarmUp = time.Millisecond
	return cfg
}

// startPelwarden runs pelwarden on free loopback ports with one Redis
// connection named default, and stops it at cleanup.
func startPelwarden(t *testing.T, redisAddr string, tune func(*config.Config), opts ...app.Option) *pelwarden {
	t.Helper()
	return startPelwardenOn(t, func(r *config.Redis) { r.Addr = redisAddr }, tune, opts...)
}

// startPelwardenOn is startPelwarden with the default connection set up by
// connect, such as a backend's connect for sentinel or cluster mode.
func startPelwardenOn(t *testing.T, connect func(*config.Redis), tune func(*config.Config), opts ...app.Option) *pelwarden {
	t.Helper()
	cfg := testConfig("")
	connect(&cfg.Redis[0])
	if tune != nil {
		tune(&cfg)
	}
	return runPelwarden(t, cfg, insecure.NewCredentials(), opts...)
}

// runPelwarden runs pelwarden with cfg and connects a KEDA client to it
// with creds; pelwarden stops at cleanup.
func runPelwarden(t *testing.T, cfg config.Config, creds credentials.TransportCredentials, opts ...app.Option) *pelwarden {
	t.Helper()
	return runPelwardenLogging(t, cfg, creds, slog.LevelDebug, opts...)
}

// runPelwardenLogging is runPelwarden logging from level: a suite that
// measures pelwarden under thousands of calls a second logs what a
// deployed pelwarden logs, not a debug line a call.
func runPelwardenLogging(t *testing.T, cfg config.Config, creds credentials.TransportCredentials, level slog.Level, opts ...app.Option) *pelwarden {
	t.Helper()
	logs := &tailLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pelwarden's log, its last %d bytes at most:\n%s", tailLogBytes, logs.String())
		}
	})
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level})), opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	p := &pelwarden{app: a, client: externalscaler.NewExternalScalerClient(conn), conn: conn, logs: logs}
	var stopped bool
	p.stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = conn.Close()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("pelwarden did not stop within 10s")
		}
	}
	t.Cleanup(p.stop)
	return p
}

// tailLogBytes is how much of pelwarden's log a test keeps to show when
// it fails.
const tailLogBytes = 256 << 10

// tailLog keeps the last tailLogBytes written to it.
type tailLog struct {
	mu  sync.Mutex
	buf []byte
}

func (l *tailLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - tailLogBytes; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *tailLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// withProfile moves the liveness keys of a trigger's metadata into a
// liveness profile named name, as an operator would write it, and returns
// the tune that adds the profile to the configuration and the metadata
// that names it instead, keeping its other keys. Tests whose trigger asks
// for hygiene use it: a trigger's own liveness keys serve its metric only.
func withProfile(name string, md map[string]string) (func(*config.Config), map[string]string) {
	profile := map[string]string{}
	out := map[string]string{metadata.ProfileKey: name}
	for k, v := range md {
		if slices.Contains(metadata.LivenessKeys, k) {
			profile[k] = v
		} else {
			out[k] = v
		}
	}
	return func(c *config.Config) {
		if c.Triggers.Profiles == nil {
			c.Triggers.Profiles = map[string]map[string]string{}
		}
		c.Triggers.Profiles[name] = profile
	}, out
}

// tunes applies each tune in turn; a nil one is skipped.
func tunes(fs ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fs {
			if f != nil {
				f(c)
			}
		}
	}
}

func ref(md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "default", ScalerMetadata: md}
}

func heartbeat(t *testing.T, rdb redis.Cmdable, key string, at time.Time) {
	t.Helper()
	require.NoError(t, rdb.Set(context.Background(), key, strconv.FormatInt(at.UnixMilli(), 10), 0).Err())
}

// beatEvery writes each key's value every 100 ms until the test ends, as
// workers that heartbeat do; value is called at each write.
func beatEvery(t *testing.T, rdb redis.Cmdable, values map[string]func() string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for k, v := range values {
				_ = rdb.Set(ctx, k, v(), 0).Err()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	for k := range values {
		eventually(t, time.Second, func() error { return rdb.Get(context.Background(), k).Err() })
	}
}

// msAgo is a heartbeat value written ago.
func msAgo(ago time.Duration) func() string {
	return func() string { return strconv.FormatInt(time.Now().Add(-ago).UnixMilli(), 10) }
}

// metric calls GetMetrics and returns the value after checking that the
// float and the int fields agree.
func metric(ctx context.Context, t *testing.T, c externalscaler.ExternalScalerClient, md map[string]string) (int64, error) {
	t.Helper()
	res, err := c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: "s0-pelwarden"})
	if err != nil {
		return 0, err
	}
	require.Len(t, res.GetMetricValues(), 1)
	v := res.GetMetricValues()[0]
	require.Equal(t, "s0-pelwarden", v.GetMetricName())
	require.InDelta(t, float64(v.GetMetricValue()), v.GetMetricValueFloat(), 0, "both value fields are filled and agree")
	return v.GetMetricValue(), nil
}

func eventually(t *testing.T, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if last = cond(); last == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, last, "condition not met within %s", within)
}
