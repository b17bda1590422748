package redisx

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakerRetry is the pause after a failed read before the next dial.
const wakerRetry = 200 * time.Millisecond

// run serves one loop's watches until ctx ends or no watch is left.
func (w *Waker) run(ctx context.Context, l *wakeLoop) {
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	for ctx.Err() == nil {
		streams, ids := w.armed(l)
		if len(streams) == 0 {
			if w.retire(l) {
				return
			}
			select {
			case <-l.changed:
				continue
			case <-ctx.Done():
				return
			}
		}
		if conn == nil {
			var err error
			if conn, err = w.dial(ctx, l, streams[0]); err != nil {
				w.backoff(ctx, l, err)
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
			w.backoff(ctx, l, err)
			continue
		}
		at := time.Now()
		for _, s := range res {
			if len(s.Messages) > 0 {
				w.fire(l, s.Stream, s.Messages[0].ID, at)
			}
		}
	}
}

// retire removes a loop left without watches, so a slot nobody waits on
// holds no connection; an Arm after it starts a new loop.
func (w *Waker) retire(l *wakeLoop) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(l.watches) > 0 {
		return false
	}
	if w.loops[l.slot] == l {
		delete(w.loops, l.slot)
	}
	return true
}

// dial opens the loop's connection on the server holding stream: the
// connection's own server, or in a cluster the master serving the slot.
func (w *Waker) dial(ctx context.Context, l *wakeLoop, stream string) (*redis.Conn, error) {
	node, err := w.home(ctx, stream)
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	w.mu.Lock()
	l.connID, l.node = id, node
	w.mu.Unlock()
	return conn, nil
}

// home returns the client whose server holds stream. In a cluster it is
// the waker's own client to the slot's master, so blocking reads take no
// connection from the pool the scaler's reads use.
func (w *Waker) home(ctx context.Context, stream string) (*redis.Client, error) {
	if w.cluster == nil {
		return NodeForKey(ctx, w.client, stream)
	}
	master, err := w.cluster.MasterForKey(ctx, stream)
	if err != nil {
		return nil, err
	}
	opts := master.Options()
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.nodes[opts.Addr]
	if c == nil {
		own := *opts
		c = redis.NewClient(&own)
		w.nodes[opts.Addr] = c
	}
	return c, nil
}

func (w *Waker) backoff(ctx context.Context, l *wakeLoop, err error) {
	w.mu.Lock()
	l.connID, l.node = 0, nil
	w.mu.Unlock()
	if ctx.Err() == nil {
		w.log.Warn("stream waker: redis read failed; retrying", "err", err)
	}
	if w.cluster != nil {
		// A MOVED or a dead node means the slot map is stale; read it again
		// before the next dial.
		w.cluster.ReloadState(ctx)
	}
	select {
	case <-time.After(wakerRetry):
	case <-ctx.Done():
	}
}

// armed lists each armed stream with the id its watch waits above.
func (w *Waker) armed(l *wakeLoop) (streams, ids []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, sw := range l.watches {
		streams = append(streams, s)
		ids = append(ids, sw.after)
	}
	return streams, ids
}

// fire closes stream's watch if id is above the id it waits above, for
// every holder at once.
func (w *Waker) fire(l *wakeLoop, stream, id string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sw := l.watches[stream]
	if sw == nil || !idLess(sw.after, id) {
		return
	}
	sw.firedAt = at
	close(sw.fired)
	delete(l.watches, stream)
	if w.watches[stream] == sw {
		delete(w.watches, stream)
	}
	w.forgetLocked(stream)
}
