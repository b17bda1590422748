// Package app wires pelwarden together: Redis connections, the liveness
// view, the gRPC server (ExternalScaler, health, reflection), the HTTP server
// (metrics and probes), and a bounded shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"k8s.io/klog/v2"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/scaler"
	"github.com/pelwarden/pelwarden/internal/tlsreload"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// readinessInterval is how often the Redis connections are pinged for
// readiness.
const readinessInterval = 5 * time.Second

// App is a configured pelwarden with its listeners bound.
type App struct {
	cfg config.Config
	log *slog.Logger
	// env is what trigger metadata is parsed against: the connections
	// and the liveness profiles of the configuration.
	env   metadata.Env
	conns *redisx.Conns
	view  *liveness.View
	grpc  *grpc.Server
	http  *http.Server
	hs    *health.Server

	grpcLis, httpLis net.Listener

	wakers  map[string]*redisx.Waker
	hygiene *hygiene.Loop
	// triggers admits trigger metadata and enrolls groups in hygiene.
	triggers *trigger.Registry
	pods     *kube.Watcher
	ready    readiness
	// tls follows the gRPC certificate files; nil when grpc.tls is off.
	tls *tlsreload.Reloader
	// reg holds every collector /metrics serves.
	reg *registry
}

// Option changes how New builds pelwarden.
type Option func(*options)

type options struct {
	kube kube.Pods
}

// WithKubernetesClient makes the kubernetes source watch pods through
// client instead of the client kubernetes.* in the config describes, such
// as client-go's fake clientset in tests (kube.PodsFrom).
func WithKubernetesClient(client kube.Pods) Option {
	return func(o *options) { o.kube = client }
}

// Run starts pelwarden and serves until ctx ends.
func Run(ctx context.Context, cfg config.Config) error {
	a, err := New(cfg, NewLogger(cfg.Log, os.Stderr)) //nolint:contextcheck // New starts the configuration's pod watches, which run as long as the watcher, not as ctx
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// New builds pelwarden and binds its listeners, so GRPCAddr and HTTPAddr
// are known before Run. When a step fails, what the steps before it opened
// is closed again, last first.
func New(cfg config.Config, log *slog.Logger, opt ...Option) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every line pelwarden logs passes the clip handler, so that no name,
	// namespace or value a caller sent reaches the log longer than
	// clip.MaxLogValue, whichever component logs it.
	log = slog.New(clip.NewHandler(log.Handler()))
	var o options
	for _, f := range opt {
		f(&o)
	}
	if cfg.Kubernetes.Enabled && o.kube == nil {
		k := cfg.Kubernetes
		client, err := kube.NewClient(k.Kubeconfig, "pelwarden", float32(k.APIQPS), k.APIBurst)
		if err != nil {
			return nil, err
		}
		o.kube = client
	}
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	redisx.SetLogger(log)
	conns, err := redisx.Open(cfg.Redis)
	if err != nil {
		return nil, err
	}
	conns.SetVersionLog(log)
	undo.push(conns.Close)
	a := &App{cfg: cfg, log: log, conns: conns, wakers: make(map[string]*redisx.Waker), env: cfg.Env()}

	reg := newRegistry()
	a.reg = reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: cfg.Scaler.LagEstimateCap}
	var annotate func(liveness.Target, *liveness.Observation)
	if o.kube != nil {
		setKlogLogger(log)
		a.pods = kube.New(o.kube, kube.Options{IdleExpiry: cfg.Scaler.TargetIdleExpiry, OnGone: a.podGone, OnCurrent: a.podsCurrent, Log: log,
			MaxSets: cfg.Kubernetes.MaxPodWatches, MaxSetsPerClaimant: cfg.Kubernetes.MaxPodWatchesPerNamespace})
		annotate = a.pods.Annotate
	}
	var m *metrics
	a.view = liveness.NewView(reader.Fetch, liveness.ViewOptions{
		Annotate:     annotate,
		Freshness:    cfg.Scaler.Freshness,
		FetchTimeout: cfg.Scaler.RequestTimeout,
		FetchBatch:   reader.FetchBatch,
		Expiry:       cfg.Scaler.TargetIdleExpiry,
		MaxTargets:   cfg.Scaler.MaxTargets,
		Breaker:      liveness.Breaker{Fraction: float64(cfg.Scaler.BreakerPercent) / 100, MinConsumers: cfg.Scaler.BreakerMinConsumers},
		Confirm:      reader.Confirm,
		OnLook:       func(byBeats bool) { m.looked(byBeats) },
		OnRead:       func(c liveness.ReadCause) { m.reads.WithLabelValues(c.String()).Inc() },
		OnBatch:      func(n int) { m.batches.Observe(float64(n)) },
		OnAnswer:     func(age time.Duration) { m.answerAge.Observe(age.Seconds()) },
		OnRefresh: func(t liveness.Target, s *liveness.Snapshot, err error, took time.Duration) {
			if err == nil {
				a.hygiene.Observe(t, s)
			}
			if m.refreshed(t, s, err, took) {
				log.Warn("consumer group not found; reporting 0", "target", t.String())
			}
			if err == nil {
				logBreaker(log, t, s)
			}
			if err == nil && s.LagEstimated && s.Lag > 0 {
				log.Debug("lag is NULL in XINFO GROUPS; reporting an estimate", "target", t.String(), "estimate", s.Lag)
			}
		},
		OnExpire: func(t liveness.Target) {
			m.expired(t)
			log.Info("target expired", "target", t.String())
		},
	})
	reports := admin.NewReports(cfg.Scaler.MaxTargets)
	var podSets func() []kube.SetState
	if a.pods != nil {
		podSets = a.pods.States
	}
	m = newMetrics(reg, a.view, reports, podSets, time.Now)
	m.refusing = conns.Refusing
	m.conns = conns.Names()
	bus := events.NewBus(events.Options{}, reg)
	engine, err := reclaim.New(reclaim.Options{View: a.view, Events: bus, BatchSize: int64(cfg.Hygiene.BatchSize), Log: log,
		Durability: durability(cfg.Redis), Writes: conns, Servers: conns}, reg)
	if err != nil {
		return nil, err
	}

	a.hygiene = hygiene.New(a.view, conns, hygiene.Options{
		ScanInterval: cfg.Hygiene.ScanInterval,
		LeaseTTL:     cfg.Hygiene.LeaseTTL,
		Identity:     identity(cfg.Hygiene.Identity),
		Expiry:       cfg.Scaler.TargetIdleExpiry,
		Workers:      cfg.Hygiene.Workers,
		MaxTargets:   cfg.Hygiene.MaxTargets,
		Log:          log,
		Engine:       engine,
	}, reg)
	m.hygiene = a.hygiene.Series
	if err := a.newTriggers(cfg, reg); err != nil {
		return nil, err
	}
	m.exposure = exposure{max: cfg.Scaler.MaxMetricsTargets, holders: a.triggers.Holders}
	if err := a.pinConfigPodSets(cfg); err != nil {
		return nil, err
	}

	for _, name := range conns.Names() {
		c, _ := conns.Get(name)
		a.wakers[name] = redisx.NewWaker(c, log)
	}
	sc := scaler.New(a.view, scaler.Options{
		Env:            a.env,
		RequestTimeout: cfg.Scaler.RequestTimeout,
		ResendInterval: cfg.Scaler.ActiveResendInterval,
		Arm: func(ctx context.Context, conn, stream string) (scaler.Wake, error) {
			w, ok := a.wakers[conn]
			if !ok {
				return nil, fmt.Errorf("no redis connection named %q", conn)
			}
			k, err := w.Arm(ctx, stream)
			if err != nil {
				return nil, err // not a nil *redisx.Wake in an interface
			}
			return k, nil
		},
		Reported:       m.report,
		Refused:        newRefusedSpecs(log, reg).note,
		OnPlaceholder:  newPlaceholderHPAs(reg).asked,
		Admit:          a.admit,
		ParseCacheSize: cfg.Scaler.MaxTargets,
		Log:            log,

		MaxActiveStreams:             cfg.Scaler.MaxActiveStreams,
		MaxActiveStreamsPerNamespace: cfg.Scaler.MaxActiveStreamsPerNamespace,
		MaxActiveTargetsPerGroup:     cfg.Scaler.MaxActiveTargetsPerGroup,
	})

	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pelwarden_scaler_active_streams", Help: "StreamIsActive streams open (at most scaler.maxActiveStreams).",
	}, func() float64 { return float64(sc.OpenStreams()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pelwarden_stream_waker_armed_streams", Help: "Redis streams armed for StreamIsActive: one each, however many streams wait on it.",
	}, a.armedStreams))
	registerActiveStats(reg, sc)

	creds, err := a.grpcCredentials(reg)
	if err != nil {
		return nil, err
	}
	if len(cfg.Admin.AllowedClientIdentities) > 0 && !cfg.GRPC.TLS.Mutual() {
		log.Warn("admin.allowedClientIdentities has no effect without grpc.tls.clientCAFile: no client can present a certificate")
	}
	var rpcm *rpcMetrics
	// A request past grpc.maxRecvMsgBytes is refused before it is decoded.
	a.grpc, rpcm = newGRPCServer(log, reg, newAdminAuth(cfg.Admin, log), newRefusals(cfg.GRPC.RefusedCallsPerSecond, a.triggers.Admitted, log, reg), append(creds, grpc.MaxRecvMsgSize(cfg.GRPC.MaxRecvMsgBytes))...)
	externalscaler.RegisterExternalScalerServer(a.grpc, sc)
	a.hs = health.NewServer()
	healthpb.RegisterHealthServer(a.grpc, a.hs)
	adminServer, err := admin.New(admin.Options{
		View: a.view, Conns: conns, Hygiene: a.hygiene.Lookup, Readers: a.hygiene.Readers, Provenance: a.triggers.Describe, Engine: engine,
		CheckTrigger: a.checkTrigger, Events: bus, Reports: reports,
		RequestTimeout: cfg.Scaler.RequestTimeout, Log: log,
	})
	if err != nil {
		return nil, err
	}
	pelwardenv1.RegisterAdminServer(a.grpc, adminServer)
	reflection.Register(a.grpc)
	rpcm.initialize(a.grpc) // every service is registered
	a.hs.SetServingStatus(scalerService, healthpb.HealthCheckResponse_NOT_SERVING)

	a.http = &http.Server{Handler: a.httpHandler(m.handler(reg)), ReadHeaderTimeout: 5 * time.Second}
	if a.grpcLis, err = net.Listen("tcp", cfg.GRPC.Addr); err != nil {
		return nil, fmt.Errorf("grpc.addr %s: %w", cfg.GRPC.Addr, err)
	}
	undo.push(a.grpcLis.Close)
	if a.httpLis, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
		return nil, fmt.Errorf("http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	return a, nil
}

// armedStreams is the number of streams the wakers of every connection
// have armed.
func (a *App) armedStreams() float64 {
	n := 0
	for _, w := range a.wakers {
		n += w.ArmedStreams()
	}
	return float64(n)
}

// cleanups close what New has opened so far.
type cleanups []func() error

func (c *cleanups) push(undo func() error) { *c = append(*c, undo) }

// run closes in reverse order of opening. New is already failing, so their
// errors add nothing to report.
func (c cleanups) run() {
	for _, undo := range slices.Backward(c) {
		_ = undo()
	}
}

// GRPCAddr is the bound gRPC address.
func (a *App) GRPCAddr() string { return a.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (a *App) HTTPAddr() string { return a.httpLis.Addr().String() }

// Run serves until ctx ends, then shuts down within the configured timeout.
func (a *App) Run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.view.Run(bg) })
	for _, w := range a.wakers {
		wg.Go(func() { w.Run(bg) })
	}
	wg.Go(func() { a.watchReadiness(bg) })
	wg.Go(func() {
		// Each server's version is logged, with a warning where idle
		// counts delivering reads only; one that cannot be reached now is
		// read, and logged, at its first read.
		rctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		a.conns.ReadVersions(rctx)
	})
	wg.Go(func() { a.hygiene.Run(bg) })
	wg.Go(func() { a.triggers.Run(bg) })
	if a.pods != nil {
		wg.Go(func() { a.pods.Run(bg) })
	}
	if a.tls != nil {
		wg.Go(func() { a.tls.Run(bg) })
	}

	errc := make(chan error, 2)
	go func() { errc <- a.grpc.Serve(a.grpcLis) }()
	go func() { errc <- a.http.Serve(a.httpLis) }()
	a.log.Info("pelwarden serving", "grpc", a.GRPCAddr(), "grpcTLS", grpcTLSMode(a.cfg.GRPC.TLS),
		"http", a.HTTPAddr(), "redis", a.conns.Names())

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		runErr = fmt.Errorf("server stopped: %w", err)
	}
	a.shutdown(context.WithoutCancel(ctx))
	stopBG()
	wg.Wait()
	return errors.Join(runErr, a.conns.Close())
}

// shutdown stops the servers in reverse order of need: first refuse new
// work, then let calls finish for at most the shutdown timeout, then cut
// what is left (KEDA holds StreamIsActive streams open forever).
func (a *App) shutdown(ctx context.Context) {
	a.hs.Shutdown()
	timeout := a.cfg.GRPC.ShutdownTimeout
	done := make(chan struct{})
	go func() { a.grpc.GracefulStop(); close(done) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		a.log.Warn("graceful stop timed out; closing open streams", "timeout", timeout)
		a.grpc.Stop()
		<-done
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := a.http.Shutdown(ctx); err != nil {
		_ = a.http.Close()
	}
	a.log.Info("pelwarden stopped")
}

// podGone refreshes, once its grace has passed, every target whose pods
// include one that just went: the new ghost shows in the view at once, and
// the hygiene loop, which scans on a new ghost, need not wait for its
// next scan. A pod whose name never comes back (a ReplicaSet's) has no
// grace: its targets are refreshed now.
func (a *App) podGone(ctx context.Context, set liveness.PodSet, pod string, nameUnique bool) {
	a.refreshPodSet(ctx, set, pod, func(t liveness.Target) time.Duration {
		grace := t.Spec.PodGrace
		if nameUnique {
			grace = 0
		}
		a.log.Info("pod went; refreshing its target after the grace", "target", t.String(), "pod", pod, "grace", grace)
		return grace
	})
}

// podsCurrent refreshes every target of a pod set whose cache is current
// again, so its consumers leave Unknown without waiting for the next
// refresh.
func (a *App) podsCurrent(ctx context.Context, set liveness.PodSet) {
	a.refreshPodSet(ctx, set, "", func(liveness.Target) time.Duration { return 0 })
}

// sharedRecheck is how soon a target is read again when the read after
// its pod went found the pod's consumer still reading: a read whose answer
// waited for the CPU makes the dead worker's last read look newer than the
// departure, and one more read settles it long before the next refresh.
const sharedRecheck = 200 * time.Millisecond

// refreshPodSet refreshes, each after its delay and never in the caller's
// goroutine (the pod watch's), every target that watches set. When gone
// names a pod that went and its consumer reads as a shared name, the
// target is read once more after sharedRecheck.
func (a *App) refreshPodSet(ctx context.Context, set liveness.PodSet, gone string, delay func(liveness.Target) time.Duration) {
	for _, l := range a.view.Latest() {
		t := l.Target
		if !t.Spec.Kubernetes || t.Spec.PodSet() != set {
			continue
		}
		time.AfterFunc(delay(t), func() {
			if ctx.Err() != nil {
				return
			}
			snap, err := a.view.Refresh(ctx, t)
			if err != nil || gone == "" || !sharedOwner(snap, gone) {
				return
			}
			time.AfterFunc(sharedRecheck, func() {
				if ctx.Err() == nil {
					_, _ = a.view.Refresh(ctx, t)
				}
			})
		})
	}
}

// sharedOwner reports whether a consumer of pod reads as a shared name in
// s.
func sharedOwner(s *liveness.Snapshot, pod string) bool {
	for _, c := range s.Consumers {
		if c.Owner == pod && c.SharedName {
			return true
		}
	}
	return false
}

// identity names this replica in hygiene leases: the configured name, or
// the host name (the pod's name in Kubernetes), which a restarted process
// keeps, so that it takes back the leases its earlier run left at once.
// The lease value adds the process's start time and pid to tell runs of
// one identity apart.
func identity(configured string) string {
	if configured != "" {
		return configured
	}
	host, err := os.Hostname()
	if err != nil {
		return "pelwarden"
	}
	return host
}

var klogOnce sync.Once

// setKlogLogger routes client-go's klog output into log, so there is one
// log format. klog keeps one logger per process, read unguarded by every
// reflector, so only the first call sets it: a later one would race with
// the reflectors of an App already running.
func setKlogLogger(log *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(log) })
}

// durability is each connection's WAIT after a guarded write.
func durability(conns []config.Redis) func(string) redisx.Durability {
	by := make(map[string]redisx.Durability, len(conns))
	for _, c := range conns {
		by[c.Name] = redisx.Durability{Replicas: c.WaitReplicas, Timeout: c.WaitTimeout}
	}
	return func(name string) redisx.Durability { return by[name] }
}
