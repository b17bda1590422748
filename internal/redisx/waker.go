package redisx

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakerBlock bounds one blocking XREAD; it is also the most a newly armed
// stream can wait when its arming races the start of an XREAD.
const wakerBlock = time.Second

// Waker tells when a new entry lands on a stream, within a round trip of the
// XADD, without polling: one connection runs one blocking XREAD over every
// armed stream of its Redis. Arming a stream interrupts the XREAD with
// CLIENT UNBLOCK so the new stream joins at once.
type Waker struct {
	client *redis.Client
	log    *slog.Logger

	mu      sync.Mutex
	watches map[string]map[*watch]struct{}
	changed chan struct{}
	connID  int64
}

type watch struct {
	after string // fire on the first entry with an id above this one
	fired chan struct{}
}

// NewWaker returns a waker for one Redis; Run must be running for it to fire.
func NewWaker(c *redis.Client, log *slog.Logger) *Waker {
	return &Waker{client: c, log: log, watches: make(map[string]map[*watch]struct{}), changed: make(chan struct{}, 1)}
}

// Arm returns a channel that is closed when an entry newer than the stream's
// current last entry is added, and a function to disarm it. Arm before
// reading the state you wait to see change, and no entry can slip between.
func (w *Waker) Arm(ctx context.Context, stream string) (<-chan struct{}, func(), error) {
	last, err := w.client.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return nil, nil, err
	}
	after := "0-0"
	if len(last) > 0 {
		after = last[0].ID
	}
	wt := &watch{after: after, fired: make(chan struct{})}
	w.mu.Lock()
	if w.watches[stream] == nil {
		w.watches[stream] = make(map[*watch]struct{})
	}
	w.watches[stream][wt] = struct{}{}
	id := w.connID
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	if id != 0 {
		// Best effort: without it the new stream joins at the next XREAD.
		_ = w.client.ClientUnblock(ctx, id).Err()
	}
	return wt.fired, func() { w.disarm(stream, wt) }, nil
}

func (w *Waker) disarm(stream string, wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set := w.watches[stream]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(w.watches, stream)
		}
	}
}

// Run serves armed streams until ctx ends.
func (w *Waker) Run(ctx context.Context) {
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	for ctx.Err() == nil {
		streams, ids := w.armed()
		if len(streams) == 0 {
			select {
			case <-w.changed:
				continue
			case <-ctx.Done():
				return
			}
		}
		if conn == nil {
			var err error
			if conn, err = w.dial(ctx); err != nil {
				w.backoff(ctx, err)
				continue
			}
		}
		res, err := conn.XRead(ctx, &redis.XReadArgs{Streams: append(streams, ids...), Count: 1, Block: wakerBlock}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			_ = conn.Close()
			conn = nil
			w.backoff(ctx, err)
			continue
		}
		for _, s := range res {
			if len(s.Messages) > 0 {
				w.fire(s.Stream, s.Messages[0].ID)
			}
		}
	}
}

func (w *Waker) dial(ctx context.Context) (*redis.Conn, error) {
	conn := w.client.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	w.mu.Lock()
	w.connID = id
	w.mu.Unlock()
	return conn, nil
}

func (w *Waker) backoff(ctx context.Context, err error) {
	w.mu.Lock()
	w.connID = 0
	w.mu.Unlock()
	if ctx.Err() == nil {
		w.log.Warn("stream waker: redis read failed; retrying", "err", err)
	}
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
	}
}

// armed lists each armed stream with the lowest id its watches wait above.
func (w *Waker) armed() (streams, ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, set := range w.watches {
		lowest := ""
		for wt := range set {
			if lowest == "" || idLess(wt.after, lowest) {
				lowest = wt.after
			}
		}
		streams = append(streams, s)
		ids = append(ids, lowest)
	}
	return streams, ids
}

// fire closes every watch of stream waiting above an id below id.
func (w *Waker) fire(stream, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wt := range w.watches[stream] {
		if idLess(wt.after, id) {
			close(wt.fired)
			delete(w.watches[stream], wt)
		}
	}
	if len(w.watches[stream]) == 0 {
		delete(w.watches, stream)
	}
}
