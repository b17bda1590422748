package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	stream, group = "jobs", "workers"
	ledger        = "ledger"
	token         = "demo-token-for-deregister" // admin.tokenFile wants 16 characters or more
	heartbeatAge  = 3                           // seconds without a heartbeat before a worker is a ghost
)

// Scenario times, from the start of the producer.
const (
	killAt     = 6 * time.Second  // SIGKILL worker-b, once it holds a batch
	degradeAt  = 9 * time.Second  // worker-a's provider quota runs out (SIGUSR1)
	replaceAt  = 14 * time.Second // a new pod, worker-d, starts
	recoverAt  = 16 * time.Second // worker-a's quota is back (SIGUSR1 again)
	shutdownAt = 20 * time.Second // worker-c is stopped gracefully (SIGTERM)
	steps      = 5
)

// demo runs the scenario and reports whether the books balanced.
func demo(ctx context.Context, o options) (bool, error) {
	dir, err := os.MkdirTemp("", "pelwarden-demo-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	fmt.Println("building the example worker...")
	worker := filepath.Join(dir, "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", worker, "./examples/worker").CombinedOutput(); err != nil {
		return false, fmt.Errorf("go build ./examples/worker (run the demo from the repository root, as make demo does): %w\n%s", err, out)
	}
	srv, err := redistest.StartProcess(redistest.Options{})
	if err != nil {
		return false, err
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil {
		return false, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return false, err
	}
	grpcAddr, stopApp, err := startPelwarden(ctx, srv.Addr(), tokenFile)
	if err != nil {
		return false, err
	}
	defer stopApp()

	s := &scenario{o: o, rdb: rdb, bin: worker, redis: srv.Addr(), grpc: grpcAddr, tokenFile: tokenFile, dir: dir, workers: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{}, stopped: map[string]time.Time{}}
	defer s.stopAll()
	v, err := newView(s, grpcAddr)
	if err != nil {
		return false, err
	}
	defer v.close()
	return s.play(ctx, v)
}

// startPelwarden runs pelwarden in this process: heartbeat liveness, and
// hygiene that requeues what ghosts hold.
func startPelwarden(ctx context.Context, redisAddr, tokenFile string) (string, func(), error) {
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Scaler.Freshness = 500 * time.Millisecond
	cfg.Hygiene.ScanInterval = 2 * time.Second
	cfg.Hygiene.LeaseTTL = 6 * time.Second
	cfg.Redis = []config.Redis{config.DefaultRedis("default", redisAddr)}
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget()}
	// The trigger is judged by the operator's profile: its metric leaves
	// out exactly what the hygiene target gives back.
	cfg.Triggers.Profiles = map[string]map[string]string{profile: livenessKeys()}
	cfg.Triggers.Floors.HeartbeatMaxAge = time.Second
	cfg.Triggers.Rules = []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}, Profiles: []string{profile}}}
	cfg.Admin.TokenFile = tokenFile // the workers' Deregister presents it
	//nolint:contextcheck // New starts the configuration's pod watches, which run as long as the watcher, not as ctx
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return "", nil, err
	}
	// pelwarden outlives Ctrl-C long enough for the summary.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	return a.GRPCAddr(), func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "pelwarden:", err)
		}
	}, nil
}

// profile names the liveness profile the demo's trigger is judged by.
const profile = "workers"

// livenessKeys is how the demo's workers are told alive: their heartbeats.
func livenessKeys() map[string]string {
	return map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": strconv.Itoa(heartbeatAge)}
}

// trigger is the ScaledObject trigger metadata the demo polls with.
func trigger() map[string]string {
	return map[string]string{"stream": stream, "consumerGroup": group, "pendingEntriesCount": strconv.Itoa(perReplica), "livenessProfile": profile}
}

// hygieneTarget is the group the operator's configuration looks after,
// with the profile's liveness keys.
func hygieneTarget() map[string]string {
	t := livenessKeys()
	t["stream"], t["consumerGroup"], t["reclaim"], t["entryStaleSeconds"] = stream, group, "requeue", "1"
	return t
}

// scenario is the cast: the producer and the worker processes.
type scenario struct {
	o                options
	rdb              *redis.Client
	bin, redis, grpc string
	tokenFile, dir   string
	workers          map[string]*exec.Cmd
	exited           map[string]chan struct{}
	produced         int
	events           []event
	started, end     time.Time
	// stopped is when each worker was killed or told to stop.
	stopped map[string]time.Time
	// degradedAt is when worker-a was told its quota ran out.
	degradedAt time.Duration
}

type event struct {
	at   time.Duration
	what string
}

func (s *scenario) note(what string) {
	s.events = append(s.events, event{at: time.Since(s.started), what: what})
}

func (s *scenario) startWorker(name string) error {
	cmd := exec.Command(s.bin)
	cmd.Env = append(os.Environ(), "HOSTNAME="+name, "REDIS_ADDR="+s.redis, "STREAM="+stream, "GROUP="+group,
		"HEARTBEAT_EVERY=1s", "WORK_TIME=250ms", "BATCH=20", "LEDGER="+ledger,
		"PELWARDEN_ADDR="+s.grpc, "PELWARDEN_TOKEN_FILE="+s.tokenFile)
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.workers[name] = cmd
	done := make(chan struct{})
	s.exited[name] = done
	go func() { _ = cmd.Wait(); _ = log.Close(); close(done) }()
	return nil
}

func (s *scenario) signal(name string, sig syscall.Signal) {
	if cmd, ok := s.workers[name]; ok && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

func (s *scenario) stopAll() {
	for name := range s.workers {
		select {
		case <-s.exited[name]:
		default:
			s.signal(name, syscall.SIGKILL)
			<-s.exited[name]
		}
	}
}

// produce adds the jobs due by now: the producer works in bursts, one a
// second, for 20 s, so a worker's read can take a whole batch.
func (s *scenario) produce(ctx context.Context) error {
	due := min(s.o.jobs, int(float64(s.o.jobs)*math.Ceil(time.Since(s.started).Seconds())/20))
	if due <= s.produced {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for i := s.produced; i < due; i++ {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", strconv.Itoa(i + 1)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	s.produced = due
	return nil
}

// play runs the timeline while the view samples and draws, until every job
// is processed and nothing is pending, or the limit.
func (s *scenario) play(ctx context.Context, v *view) (bool, error) {
	for _, name := range []string{"worker-a", "worker-b", "worker-c"} {
		if err := s.startWorker(name); err != nil {
			return false, err
		}
	}
	s.started = time.Now()
	s.note("3 workers start; the producer adds " + strconv.Itoa(s.o.jobs) + " jobs over 20 s")
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	step := 0
	for {
		el := time.Since(s.started)
		switch {
		case step == 0 && el >= killAt && (v.pendingOf(ctx, "worker-b") >= 8 || el >= killAt+4*time.Second):
			held := v.pendingOf(ctx, "worker-b")
			s.signal("worker-b", syscall.SIGKILL)
			s.stopped["worker-b"] = time.Now()
			s.note(fmt.Sprintf("worker-b SIGKILLed mid-job, holding %d entries", held))
			step++
		case step == 1 && el >= degradeAt && (v.pendingOf(ctx, "worker-a") >= 8 || el >= degradeAt+3*time.Second):
			held := v.pendingOf(ctx, "worker-a")
			s.signal("worker-a", syscall.SIGUSR1)
			s.degradedAt = el
			s.note(fmt.Sprintf("worker-a's provider quota runs out: its heartbeat says degraded and it stops taking jobs, holding %d entries", held))
			step++
		case step == 2 && el >= replaceAt:
			if err := s.startWorker("worker-d"); err != nil {
				return false, err
			}
			s.note("a new pod, worker-d, starts")
			step++
		case step == 3 && el >= recoverAt:
			s.signal("worker-a", syscall.SIGUSR1)
			s.note("worker-a's quota is back: its heartbeat is plain again and it takes jobs")
			step++
		case step == 4 && el >= shutdownAt:
			s.signal("worker-c", syscall.SIGTERM)
			s.stopped["worker-c"] = time.Now()
			s.note("worker-c gets SIGTERM: it finishes its job and calls Deregister")
			step++
		}
		if err := s.produce(ctx); err != nil {
			return false, err
		}
		done, err := v.sample(ctx, el)
		if err != nil {
			return false, err
		}
		if (done && step == steps) || el >= s.o.limit || ctx.Err() != nil {
			s.end = time.Now()
			return v.finish(context.WithoutCancel(ctx))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}
