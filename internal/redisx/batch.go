package redisx

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// FetchBatch reads many targets of one connection in the round trips one
// Fetch takes (liveness.BatchFetcher): their first commands in one
// pipeline, and in a second the heartbeat keys of new consumers and the
// NULL lags of them all. A ClusterClient sends a pipeline's commands to
// each node in one round trip of its own. The reads share one TIME, except
// on a cluster, where each read keeps its own: a TIME goes to any node,
// and one that fails must not fail the reads of the others.
func (r *Reader) FetchBatch(ctx context.Context, reads []liveness.Read) []liveness.ReadResult {
	out := make([]liveness.ReadResult, len(reads))
	if len(reads) == 0 {
		return out
	}
	conn := reads[0].Target.Conn
	c, ok := r.Conns.Get(conn)
	if !ok {
		return failAll(out, reads, fmt.Errorf("no redis connection named %q", conn))
	}
	pipe := c.Pipeline()
	var clock *redis.TimeCmd
	if _, cluster := c.(*redis.ClusterClient); !cluster {
		clock = pipe.Time(ctx)
	}
	firsts := make([]*groupRead, len(reads))
	for i, rd := range reads {
		firsts[i] = queueRead(ctx, pipe, clock, rd.Target, rd.Known)
	}
	sample := r.sampleOn(ctx, pipe, conn)
	if err := exec(ctx, pipe); err != nil {
		return failAll(out, reads, err)
	}
	readAt := time.Now()
	sample.record(readAt)
	more := make([]bool, len(reads))
	for i, g := range firsts {
		out[i].Obs, more[i], out[i].Err = r.collect(ctx, g, readAt)
	}
	r.finishBatch(ctx, c, reads, out, more)
	return out
}

// finishBatch ends the reads that found their groups (more): one second
// round trip for all that need it, then each read's own end (finish).
func (r *Reader) finishBatch(ctx context.Context, c redis.UniversalClient, reads []liveness.Read, out []liveness.ReadResult, more []bool) {
	pipe := c.Pipeline()
	seconds := make([]*secondRead, len(reads))
	queued := false
	for i, rd := range reads {
		if more[i] {
			seconds[i] = r.queueSecond(ctx, pipe, rd.Target, rd.Known, &out[i].Obs)
			queued = queued || seconds[i] != nil
		}
	}
	var secondErr error
	if queued {
		secondErr = exec(ctx, pipe)
	}
	for i, rd := range reads {
		if !more[i] {
			continue
		}
		if secondErr != nil && seconds[i] != nil {
			out[i].Err = fmt.Errorf("read %s: %w", rd.Target, secondErr)
			continue
		}
		out[i].Err = r.finish(ctx, c, rd.Target, seconds[i], &out[i].Obs)
	}
}

// failAll fails every read with err, as a read of its own would have.
func failAll(out []liveness.ReadResult, reads []liveness.Read, err error) []liveness.ReadResult {
	for i, rd := range reads {
		out[i].Err = fmt.Errorf("read %s: %w", rd.Target, err)
	}
	return out
}
