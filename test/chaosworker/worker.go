package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// ioTimeout bounds each dial, read and write so a dead Redis surfaces
	// as an error quickly and our own retry loop takes over.
	ioTimeout = 500 * time.Millisecond

	// minBackoff and maxBackoff bound the pause between retries of a call.
	minBackoff, maxBackoff = 50 * time.Millisecond, 200 * time.Millisecond

	// shutdownGrace is how long, after a signal, the ack of the entry in
	// hand keeps retrying before the worker gives up and leaves it pending.
	shutdownGrace = 5 * time.Second

	// errorLogEvery rate-limits Redis error lines during an outage.
	errorLogEvery = time.Second
)

type worker struct {
	cfg  config
	rdb  redis.UniversalClient
	log  *slog.Logger
	errs *errorLog
}

// run processes entries until ctx is canceled, then finishes the entry in
// hand and returns nil. It returns an error only for a bad config or when
// that last ack could not be written within shutdownGrace.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	rdb := newClient(cfg)
	defer func() { _ = rdb.Close() }()
	w := &worker{cfg: cfg, rdb: rdb, log: log, errs: &errorLog{log: log}}

	// hard outlives ctx by shutdownGrace so the entry in hand still gets
	// acked after a signal; the heartbeat runs until that ack is done.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGrace, cancelHard) })()
	hbCtx, stopHeartbeat := context.WithCancel(hard)
	var hb sync.WaitGroup
	hb.Go(func() { w.heartbeat(hbCtx) })

	log.Info("start", "redis", cfg.Redis, "stream", cfg.Stream, "group", cfg.Group, "poison_every", cfg.PoisonEvery)
	err := w.consume(ctx, hard)
	stopHeartbeat()
	hb.Wait()
	if err != nil {
		log.Error("exit", "err", err)
		return err
	}
	log.Info("exit")
	return nil
}

// newClient connects in the configured mode. go-redis would blindly
// resend a failed MULTI/EXEC; ack retries must first check whether it
// committed, so all retries are ours (cluster redirections, which resend
// nothing that ran, stay go-redis's).
func newClient(cfg config) redis.UniversalClient {
	switch cfg.Mode {
	case "cluster":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: cfg.Addrs, ClientName: cfg.Consumer,
			DialTimeout: ioTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
			MaxRetries: -1, DialerRetries: 1, DisableIdentity: true,
		})
	case "sentinel":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.MasterName, SentinelAddrs: cfg.Addrs, ClientName: cfg.Consumer,
			DialTimeout: ioTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
			MaxRetries: -1, DialerRetries: 1, DisableIdentity: true,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: cfg.Redis, ClientName: cfg.Consumer,
		DialTimeout: ioTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
		MaxRetries: -1, DialerRetries: 1,
		// CLIENT SETINFO is unknown before Redis 7.2.
		DisableIdentity: true,
	})
}

// consume reads and handles batches until ctx ends. With ReadOwnPEL it
// first pages through its own PEL (cursor "0" onward), then reads new
// entries (">").
func (w *worker) consume(ctx, hard context.Context) error {
	cursor := ">"
	if w.cfg.ReadOwnPEL {
		cursor = "0"
	}
	for {
		msgs, ok := w.read(ctx, &cursor)
		if !ok {
			return nil
		}
		if cursor != ">" {
			if len(msgs) == 0 {
				cursor = ">"
				continue
			}
			cursor = msgs[len(msgs)-1].ID
		}
		for _, m := range msgs {
			if ctx.Err() != nil {
				break // the rest of the batch stays pending for pelwarden
			}
			if err := w.handle(hard, m); err != nil {
				return err
			}
		}
	}
}

// read is one XREADGROUP, retried until it succeeds or, reporting false,
// ctx ends. When a read of new entries fails, Redis may have delivered
// entries into our PEL with the reply lost; with ReadOwnPEL the retry
// re-reads the PEL so they are processed now, not after pelwarden's timeout.
func (w *worker) read(ctx context.Context, cursor *string) ([]redis.XMessage, bool) {
	var msgs []redis.XMessage
	err := w.retry(ctx, "xreadgroup", func(ctx context.Context) error {
		streams, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: w.cfg.Group, Consumer: w.cfg.Consumer, Count: w.cfg.Count, Block: w.cfg.Block,
			Streams: []string{w.cfg.Stream, *cursor},
		}).Result()
		msgs = nil
		switch {
		case errors.Is(err, redis.Nil): // BLOCK timed out
		case err != nil:
			if w.cfg.ReadOwnPEL && *cursor == ">" {
				*cursor = "0"
			}
			return err
		case len(streams) > 0:
			msgs = streams[0].Messages
		}
		return nil
	})
	return msgs, err == nil
}

// handle processes one entry: bad entries are acked at once, poison ones
// fail after the work and stay pending, the rest are acked after the work.
// The work is not cut short by a signal: the entry in hand is finished.
func (w *worker) handle(ctx context.Context, m redis.XMessage) error {
	job, err := jobOf(m.Values)
	field := strconv.FormatInt(job, 10)
	if err != nil {
		w.log.Warn("bad entry, acking it", "id", m.ID, "err", err)
		field = "bad:" + m.ID
	} else {
		time.Sleep(w.cfg.MinProcess + rand.N(w.cfg.MaxProcess-w.cfg.MinProcess+1)) //nolint:gosec // G404: simulated work time, not a secret
		if isPoison(job, w.cfg.PoisonEvery) {
			w.log.Warn("poison entry failed, leaving it pending", "id", m.ID, "job", job)
			return nil
		}
	}
	if err := w.ack(ctx, m.ID, field, original(w.cfg.Stream, m)); err != nil {
		return fmt.Errorf("entry %s processed but left unacked: %w", m.ID, err)
	}
	w.log.Debug("processed", "id", m.ID, "ledger_field", field)
	return nil
}

// jobOf reads the integer job field; requeued copies carry it unchanged.
func jobOf(values map[string]any) (int64, error) {
	s, ok := values["job"].(string)
	if !ok {
		return 0, errors.New("no job field")
	}
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}

func isPoison(job, every int64) bool { return every > 0 && job%every == 0 }

// original names the entry a delivery is of: the first original a
// requeued copy names in pelwarden's lineage fields, or the entry itself.
// Every delivery of one produced entry has the same name, however often
// pelwarden requeued it.
func original(stream string, m redis.XMessage) string {
	s, okS := m.Values["pelwarden-original-stream"].(string)
	id, okID := m.Values["pelwarden-original-id"].(string)
	if okS && okID {
		return s + "/" + id
	}
	return stream + "/" + m.ID
}

// ackScript acknowledges an entry and counts the job: in the ledger when
// the XACK acknowledged it, in the ledger's ":stray" hash when the entry was
// no longer pending here. A stray is a job processed from a delivery the
// server no longer knows: after a failover to a replica that missed the
// delivery (the entry is then delivered again), or an entry taken from a
// live worker past hardTimeoutSeconds. The books tell those apart from a
// duplicate: two acknowledged entries of one job. An acknowledged entry
// is also counted under the original it names (lineage), in the ledger's
// ":lineage" hash: two acknowledged entries naming one original are a
// duplicate pelwarden made. KEYS: stream, ledger, stray ledger, lineage
// ledger (one slot). ARGV: group, id, field, original.
var ackScript = redis.NewScript(`
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[4], ARGV[4], 1)
  return redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
end
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
return 0`)

// ack counts field and acks id in one script, retrying until it succeeds.
// A call that failed on the client side may still have run (Redis ran it,
// then died before replying), and resending it would count the job twice.
// So before each resend ack asks Redis whether id is still pending: if
// not, the earlier call ran.
func (w *worker) ack(ctx context.Context, id, field, orig string) error {
	sent := false
	return w.retry(ctx, "ack", func(ctx context.Context) error {
		if sent {
			pending, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: w.cfg.Stream, Group: w.cfg.Group, Start: id, End: id, Count: 1,
			}).Result()
			if err != nil {
				return err
			}
			if len(pending) == 0 {
				w.log.Info("ack in doubt is no longer pending, not resending", "id", id)
				return nil
			}
		}
		sent = true
		return ackScript.Run(ctx, w.rdb, []string{w.cfg.Stream, w.cfg.Ledger, w.cfg.Ledger + ":stray", w.cfg.Ledger + ":lineage"},
			w.cfg.Group, id, field, orig).Err()
	})
}

// heartbeat SETs the heartbeat key to the time in ms on its own schedule,
// so slow work or a Redis retry loop elsewhere never delays it.
func (w *worker) heartbeat(ctx context.Context) {
	key := strings.ReplaceAll(w.cfg.HeartbeatKey, "{consumer}", w.cfg.Consumer)
	tick := time.NewTicker(w.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		_ = w.retry(ctx, "heartbeat", func(ctx context.Context) error {
			return w.rdb.Set(ctx, key, time.Now().UnixMilli(), 0).Err()
		})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// retry calls call until it returns nil, pausing 50ms doubling to 200ms
// between attempts. It returns ctx.Err() once ctx ends.
func (w *worker) retry(ctx context.Context, op string, call func(context.Context) error) error {
	backoff := minBackoff
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := call(ctx)
		if err == nil {
			return nil
		}
		w.errs.report(op, err)
		pause := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			pause.Stop()
			return ctx.Err()
		case <-pause.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// errorLog logs at most one Redis error per errorLogEvery and counts the
// rest, so a restart of Redis yields a few lines instead of hundreds.
type errorLog struct {
	log        *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (e *errorLog) report(op string, err error) {
	e.mu.Lock()
	now := time.Now()
	if now.Sub(e.last) < errorLogEvery {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	suppressed := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn("redis error, retrying", "op", op, "err", err, "suppressed", suppressed)
}
