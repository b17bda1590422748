package liveness

import (
	"context"
	"errors"
	"sync"
)

// Reads of groups on one connection go to Redis together. Redis pays for
// a round trip's system calls and pass of its event loop once, however
// many commands it carries: a read in a batch of a hundred costs it a
// fraction of a lone one. A read joins its connection's queue; a batch
// takes what is queued when it starts, so a lone poll's read goes at once,
// and the reads asked for while a batch is out go together in the next.

// BatchFetcher reads the groups of reads, all of one connection, in as
// few round trips as it can, and returns one result per read, in order.
// Each read is what a Fetcher is asked: the group, the spec of what
// changes the read, and the consumers of the group's previous read.
type BatchFetcher func(ctx context.Context, reads []Read) []ReadResult

// Read is one read of a BatchFetcher.
type Read struct {
	Target Target
	Known  []string
}

// ReadResult is the outcome of one Read.
type ReadResult struct {
	Obs Observation
	Err error
}

// errShortBatch is the error of a read a BatchFetcher left out.
var errShortBatch = errors.New("the batch read returned no result for this group")

// maxBatch bounds the reads of one round trip: a batch's replies stay
// small beside the connection's buffers, and a poll waiting on one does
// not wait for thousands of groups.
const maxBatch = 256

// batches are the read queues of the connections.
type batches struct {
	mu     sync.Mutex
	byConn map[string]*connBatch
}

// connBatch is one connection's queue and how many batches are out.
type connBatch struct {
	queue   []pendingRead
	running int
}

// pendingRead is a read waiting for its batch.
type pendingRead struct {
	r     *reader
	c     *call
	known []string
}

// startReads sends reads, each already its reader's inflight call: one at
// a time without a BatchFetcher, else through their connections' queues.
// A read runs under its own timeout, detached from ctx, so one impatient
// caller cannot fail the read for the others waiting on it.
func (v *View) startReads(ctx context.Context, reads []pendingRead) {
	ctx = context.WithoutCancel(ctx)
	if v.opts.FetchBatch == nil {
		for _, p := range reads {
			go v.read(ctx, p.r, p.c, p.known)
		}
		return
	}
	b := &v.batches
	b.mu.Lock()
	var start []*connBatch
	for _, p := range reads {
		conn := p.r.key.Conn
		q := b.byConn[conn]
		if q == nil {
			q = &connBatch{}
			b.byConn[conn] = q
		}
		q.queue = append(q.queue, p)
		if q.running < v.opts.Concurrency {
			q.running++
			start = append(start, q)
		}
	}
	b.mu.Unlock()
	for _, q := range start {
		go v.drain(ctx, q)
	}
}

// drain sends q's queued reads, a batch at a time, until none is left.
func (v *View) drain(ctx context.Context, q *connBatch) {
	b := &v.batches
	for {
		b.mu.Lock()
		n := min(len(q.queue), maxBatch)
		if n == 0 {
			q.running--
			b.mu.Unlock()
			return
		}
		batch := make([]pendingRead, n)
		copy(batch, q.queue)
		clear(q.queue[:n])
		q.queue = q.queue[n:]
		if len(q.queue) == 0 {
			q.queue = nil
		}
		b.mu.Unlock()
		v.readBatch(ctx, batch)
	}
}

// readBatch reads a batch in one BatchFetcher call and ends each read.
func (v *View) readBatch(ctx context.Context, batch []pendingRead) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.FetchTimeout)
	defer cancel()
	reads := make([]Read, len(batch))
	sent := v.opts.Now()
	for i, p := range batch {
		p.c.started = sent
		reads[i] = Read{Target: p.r.key.target(), Known: p.known}
	}
	if v.opts.OnBatch != nil {
		v.opts.OnBatch(len(batch))
	}
	res := v.opts.FetchBatch(ctx, reads)
	for i, p := range batch {
		if i < len(res) {
			p.c.obs, p.c.err = res[i].Obs, res[i].Err
		} else {
			p.c.err = errShortBatch
		}
		v.ended(p.r, p.c)
	}
}

// readScheduled starts a read, for every target of each reader, of the
// readers that need one (need is called with the reader's mu held): the
// reads the view owes at one instant, batched by connection. A reader
// with a read in flight is not read again: that read settles all its
// targets when it ends, and a look it began too early to decide is set
// again from it, so the next turn of Run reads once more.
func (v *View) readScheduled(ctx context.Context, rs []*reader, need func(*reader) bool, cause ReadCause) {
	reads := make([]pendingRead, 0, len(rs))
	for _, r := range rs {
		r.mu.Lock()
		switch {
		case r.inflight != nil:
			r.inflight.all = true
		case need(r):
			c := v.newCallLocked(r, nil, cause)
			reads = append(reads, pendingRead{r: r, c: c, known: r.known})
		}
		r.mu.Unlock()
	}
	v.startReads(ctx, reads)
}
