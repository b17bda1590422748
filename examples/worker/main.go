// Command worker is an example Redis Streams worker that plays well with
// pelwarden. It does the things teams learned the hard way:
//
//   - its consumer name is unique to the pod (HOSTNAME), so two processes
//     never share one pending list;
//   - it heartbeats, so pelwarden can tell a long job from a dead worker;
//   - at start it re-reads its own pending list before new entries, so a
//     container restarted inside the same pod finishes what it held;
//   - on SIGTERM it stops reading, finishes the job in hand, and calls
//     pelwarden's Deregister, which requeues what it read but did not start
//     and deletes its consumer, so nothing waits for a ghost to be noticed;
//   - when it cannot do the work (here on SIGUSR1, as a worker whose
//     provider quota ran out), it says so in its heartbeat, a JSON object
//     with "degraded": true and the reason, and stops taking jobs: pelwarden
//     judges it Degraded and gives what it holds to the others. SIGUSR1
//     again brings it back.
//
// A job pelwarden requeued comes back as a copy that names its first
// original in pelwarden-original-stream and pelwarden-original-id; every
// delivery of one job names the same original. A worker whose jobs must
// not run twice keeps the names of the jobs it finished (in the same
// MULTI as its XACK) and acknowledges a delivery whose name it has already
// finished without doing the work again: pelwarden delivers a job again
// only when it takes the entry from a worker it judged dead (or one past
// hardTimeoutSeconds), which may have done the work without acknowledging
// it.
//
// Configuration is from the environment, as in a pod spec:
//
//	REDIS_ADDR            host:port (required)
//	REDIS_PASSWORD        optional
//	STREAM, GROUP         the consumer group to read (required; created if missing)
//	HOSTNAME              the consumer name (set by Kubernetes to the pod name)
//	HEARTBEAT_KEY         key pattern with {consumer}; default hb:{consumer}
//	HEARTBEAT_EVERY       default 5s
//	WORK_TIME             simulated time per job; default 200ms
//	BATCH                 entries per read; default 5
//	LEDGER                optional hash: HINCRBY <job> 1 in the same MULTI as the XACK; an entry
//	                      without a job field counts under the original it names (below)
//	PELWARDEN_ADDR        pelwarden's gRPC address; empty skips Deregister
//	PELWARDEN_TOKEN_FILE  the workers' bearer token (admin.workerTokenFile) for Deregister
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := fromEnv(os.Getenv)
	if err != nil {
		log.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, log.With("consumer", cfg.consumer)); err != nil {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

type config struct {
	redisAddr, redisPassword string
	stream, group, consumer  string
	heartbeatKey             string
	heartbeatEvery, work     time.Duration
	batch                    int64
	ledger                   string
	pelwarden, tokenFile     string
}

func fromEnv(get func(string) string) (config, error) {
	c := config{
		redisAddr: get("REDIS_ADDR"), redisPassword: get("REDIS_PASSWORD"),
		stream: get("STREAM"), group: get("GROUP"), consumer: get("HOSTNAME"),
		heartbeatKey: or(get("HEARTBEAT_KEY"), "hb:{consumer}"),
		ledger:       get("LEDGER"), pelwarden: get("PELWARDEN_ADDR"), tokenFile: get("PELWARDEN_TOKEN_FILE"),
	}
	var err error
	if c.heartbeatEvery, err = time.ParseDuration(or(get("HEARTBEAT_EVERY"), "5s")); err != nil || c.heartbeatEvery <= 0 {
		return c, fmt.Errorf("HEARTBEAT_EVERY must be a positive duration such as 5s, got %q", get("HEARTBEAT_EVERY"))
	}
	if c.work, err = time.ParseDuration(or(get("WORK_TIME"), "200ms")); err != nil || c.work < 0 {
		return c, fmt.Errorf("WORK_TIME must be a duration such as 200ms, got %q", get("WORK_TIME"))
	}
	if c.batch, err = strconv.ParseInt(or(get("BATCH"), "5"), 10, 64); err != nil || c.batch < 1 {
		return c, fmt.Errorf("BATCH must be a whole number >= 1, got %q", get("BATCH"))
	}
	switch {
	case c.redisAddr == "" || c.stream == "" || c.group == "" || c.consumer == "":
		return c, errors.New("REDIS_ADDR, STREAM, GROUP and HOSTNAME are required")
	case !strings.Contains(c.heartbeatKey, "{consumer}"):
		return c, fmt.Errorf("HEARTBEAT_KEY must contain {consumer}, got %q", c.heartbeatKey)
	}
	return c, nil
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, Password: cfg.redisPassword})
	defer rdb.Close()
	// The group may exist already; BUSYGROUP is fine.
	if err := rdb.XGroupCreateMkStream(context.WithoutCancel(ctx), cfg.stream, cfg.group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("creating group: %w", err)
	}
	w := &worker{rdb: rdb, cfg: cfg, log: log, health: newHealth()}
	hbCtx, stopHeartbeat := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHeartbeat()
	go w.health.follow(hbCtx)
	go heartbeat(hbCtx, rdb, cfg, w.health, log)

	w.loop(ctx)
	// Shutting down: the job in hand is done (loop returns between jobs);
	// what was read but not started goes back through pelwarden.
	if cfg.pelwarden != "" {
		if derr := deregister(context.WithoutCancel(ctx), cfg, log); derr != nil {
			log.Warn("deregister failed; pelwarden will reclaim the entries once this consumer is judged a ghost", "err", derr)
		}
	}
	stopHeartbeat()
	_ = rdb.Del(context.WithoutCancel(ctx), strings.ReplaceAll(cfg.heartbeatKey, "{consumer}", cfg.consumer)).Err()
	return nil
}

// heartbeat writes the current time, in milliseconds, until ctx ends; while
// the worker is degraded, a JSON object that says so and why. A change of
// health is written at once.
func heartbeat(ctx context.Context, rdb *redis.Client, cfg config, h *health, log *slog.Logger) {
	key := strings.ReplaceAll(cfg.heartbeatKey, "{consumer}", cfg.consumer)
	tick := time.NewTicker(cfg.heartbeatEvery)
	defer tick.Stop()
	for {
		var value any = time.Now().UnixMilli()
		if reason, degraded := h.degraded(); degraded {
			b, _ := json.Marshal(map[string]any{"time": time.Now().UnixMilli(), "degraded": true, "degradedReasons": []string{reason}})
			value = string(b)
		}
		// The key expires on its own if this process dies without a word.
		if err := rdb.Set(ctx, key, value, 10*cfg.heartbeatEvery).Err(); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.changed:
		}
	}
}

// health is whether the worker can do the work; SIGUSR1 toggles it, as a
// provider quota running out and coming back would. A change is only
// reported between jobs (settle): pelwarden takes a degraded worker's stale
// entries as soon as its heartbeat says so, the job in hand included, so
// the worker says it only once it holds no job in hand.
type health struct {
	want    atomic.Bool // asked to be degraded
	reason  atomic.Pointer[string]
	changed chan struct{}
}

func newHealth() *health { return &health{changed: make(chan struct{}, 1)} }

// degraded is what the heartbeat reports.
func (h *health) degraded() (string, bool) {
	if r := h.reason.Load(); r != nil {
		return *r, true
	}
	return "", false
}

// settle makes the reported health the one asked for and says whether the
// worker is degraded; the loop calls it between jobs.
func (h *health) settle(log *slog.Logger) bool {
	_, was := h.degraded()
	want := h.want.Load()
	switch {
	case want && !was:
		reason := "provider_quota_exhausted_until_" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		h.reason.Store(&reason)
		log.Info("degraded: no more jobs until it passes", "reason", reason)
	case !want && was:
		h.reason.Store(nil)
		log.Info("healthy again: taking jobs")
	default:
		return was
	}
	select {
	case h.changed <- struct{}{}:
	default:
	}
	return want
}

// follow toggles the health asked for on each SIGUSR1.
func (h *health) follow(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			h.want.Store(!h.want.Load())
		}
	}
}

type worker struct {
	rdb    *redis.Client
	cfg    config
	log    *slog.Logger
	health *health
}

// loop reads its own pending entries first ("0"), then new ones (">"),
// until ctx ends, which is how it returns: a shutdown is not an error. It
// stops only between jobs.
func (w *worker) loop(ctx context.Context) {
	own, from := true, "0"
	for ctx.Err() == nil {
		if w.health.settle(w.log) {
			// A degraded worker takes no jobs; what it holds is given
			// back by pelwarden once stale.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			own, from = true, "0"
			continue
		}
		res, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: w.cfg.group, Consumer: w.cfg.consumer, Streams: []string{w.cfg.stream, from},
			Count: w.cfg.batch, Block: time.Second,
		}).Result()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			w.log.Warn("read failed; retrying", "err", err)
			time.Sleep(time.Second)
			own, from = true, "0" // after a failure, finish what is held first
			continue
		}
		msgs := res[0].Messages
		if own && len(msgs) == 0 {
			own, from = false, ">" // own pending list done: new entries now
			continue
		}
		for _, m := range msgs {
			if ctx.Err() != nil {
				return // read but not started: Deregister requeues it
			}
			if w.health.settle(w.log) {
				break // held until pelwarden gives it back
			}
			if err := w.process(ctx, m); err != nil {
				w.log.Warn("job failed; it stays pending", "id", m.ID, "err", err)
			}
		}
		if own {
			from = msgs[len(msgs)-1].ID // page through the own PEL
		}
	}
}

// process does the job, then acknowledges it; with a ledger, the count
// and the ack are one transaction, so a job counts once per ack.
func (w *worker) process(ctx context.Context, m redis.XMessage) error {
	time.Sleep(w.cfg.work) // the work itself; finished even after SIGTERM
	actx := context.WithoutCancel(ctx)
	if w.cfg.ledger == "" {
		return w.rdb.XAck(actx, w.cfg.stream, w.cfg.group, m.ID).Err()
	}
	job, _ := m.Values["job"].(string)
	_, err := w.rdb.TxPipelined(actx, func(p redis.Pipeliner) error {
		p.HIncrBy(actx, w.cfg.ledger, or(job, original(w.cfg.stream, m)), 1)
		p.XAck(actx, w.cfg.stream, w.cfg.group, m.ID)
		return nil
	})
	return err
}

// deregister asks pelwarden to requeue this consumer's pending entries and
// delete it.
func deregister(parent context.Context, cfg config, log *slog.Logger) error {
	conn, err := grpc.NewClient(cfg.pelwarden, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(parent, 10*time.Second)
	defer cancel()
	if cfg.tokenFile != "" {
		token, err := os.ReadFile(cfg.tokenFile)
		if err != nil {
			return err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	res, err := pelwardenv1.NewAdminClient(conn).Deregister(ctx, &pelwardenv1.DeregisterRequest{
		Target:   &pelwardenv1.TargetRef{Stream: cfg.stream, Group: cfg.group},
		Consumer: cfg.consumer,
	})
	if err != nil {
		return err
	}
	log.Info("deregistered", "requeued", res.GetRequeued(), "deadLettered", res.GetDeadLettered(), "consumerDeleted", res.GetConsumerDeleted())
	return nil
}

// original names the job an entry delivers: the first original a copy
// names, or the entry itself.
func original(stream string, m redis.XMessage) string {
	s, okS := m.Values["pelwarden-original-stream"].(string)
	id, okID := m.Values["pelwarden-original-id"].(string)
	if okS && okID {
		return s + "/" + id
	}
	return stream + "/" + m.ID
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
