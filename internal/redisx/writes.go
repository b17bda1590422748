package redisx

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// A node's writes are followed like its reachability (outage.go): since
// when it accepts them, and when it last evicted keys. Two sources say
// so. Every reply to pelwarden's own commands that refuses a write (OOM,
// MISCONF, READONLY, NOREPLICAS) starts a refusal at once; and a read of
// a group samples the node, at most once every 2 s per node whatever the
// targets, in the read's own round trip where the node serves the whole
// read: INFO stats and errorstats. Idle times need it as much as
// heartbeats: all but OOM refuse XREADGROUP too. Writes refused to anyone since the last sample are a
// refusal, a sample without any ends it, and a rise of evicted_keys is
// an eviction. Nothing is decided here: liveness
// holds what could not be written Unknown, and hygiene waits.

// sampleEvery is the least time between two samples of one node's writes:
// one costs Redis about 2 µs (INFO stats and errorstats, 1.3 kB), so at
// most 1 µs a second per node. A refusal that begins between two samples
// hides at most this long a heartbeat's failure to be written, so a max
// age longer than a worker's beat interval plus 2 s is told from death.
const sampleEvery = 2 * time.Second

// Without INFO (an ACL user without +info), a refusal a reply showed is
// taken to end replyHold later: the next write tries again, and a refusal
// still there starts again. noInfoRetry is how long a node whose INFO was
// refused waits to be asked again.
const (
	replyHold   = 10 * time.Second
	noInfoRetry = time.Minute
)

// writeState is a node's writes as pelwarden knows them; nodeWatch.mu
// guards it.
type writeState struct {
	// refused is the refusal in force, RefusalNone while writes are
	// accepted; last is the latest refusal, and since when writes are
	// accepted again after it.
	refused, last liveness.Refusal
	since         time.Time
	// byReply is when a reply last showed the refusal.
	byReply time.Time
	// evicted is evicted_keys as last sampled, evictedAt when it was last
	// seen to rise.
	evicted    int64
	evictKnown bool
	evictedAt  time.Time
	// errs counts the writes refused as last sampled, by refusal.
	errs     refusalCounts
	errKnown bool
	// next is when the node may be sampled again; sampled says a sample
	// answered.
	next    time.Time
	sampled bool
}

// refuse records refusal r seen at at; it reports whether writes were
// accepted until then.
func (st *writeState) refuse(r liveness.Refusal, at time.Time, reply bool) bool {
	began := st.refused == liveness.RefusalNone
	st.refused, st.last, st.since = r, r, time.Time{}
	if reply {
		st.byReply = at
	}
	return began
}

// accept records writes accepted again at at; it reports whether they
// were refused until then.
func (st *writeState) accept(at time.Time) bool {
	if st.refused == liveness.RefusalNone {
		return false
	}
	st.refused, st.since = liveness.RefusalNone, at
	return true
}

// expire ends, at at, a refusal only a reply showed on a node that cannot
// be sampled: the next write finds out.
func (st *writeState) expire(at time.Time) bool {
	if st.refused == liveness.RefusalNone || st.sampled || at.Sub(st.byReply) < replyHold {
		return false
	}
	return st.accept(st.byReply.Add(replyHold))
}

// writes is the node's writes at at, as a read stamps them (liveness's
// NodeHealth.Refused, WritableSince and EvictedAt), and whether a
// refusal ended just now.
func (n *nodeWatch) writes(at time.Time) (refused liveness.Refusal, since, evictedAt time.Time) {
	n.mu.Lock()
	st := &n.ws
	ended := st.expire(at)
	refused, since, evictedAt = st.last, st.since, st.evictedAt
	if st.refused != liveness.RefusalNone {
		refused, since = st.refused, time.Time{}
	}
	n.mu.Unlock()
	if ended && n.owner != nil {
		n.owner.logWrites(n, refused, false)
	}
	return refused, since, evictedAt
}

// refusing is the refusal in force on the node at at.
func (n *nodeWatch) refusing(at time.Time) liveness.Refusal {
	r, since, _ := n.writes(at)
	if !since.IsZero() {
		return liveness.RefusalNone
	}
	return r
}

// refusedByReply records a reply that refused a write.
func (n *nodeWatch) refusedByReply(r liveness.Refusal, at time.Time) {
	n.mu.Lock()
	began := n.ws.refuse(r, at, true)
	n.mu.Unlock()
	if began && n.owner != nil {
		n.owner.logWrites(n, r, true)
	}
}

// claimSample says whether a sample of the node is due at now, and if so
// takes it: no other read samples it for sampleEvery.
func (n *nodeWatch) claimSample(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if now.Before(n.ws.next) {
		return false
	}
	n.ws.next = now.Add(sampleEvery)
	return true
}

// sampled records a sample sent at sent and answered at at.
func (n *nodeWatch) sampled(s sample, sent, at time.Time) {
	n.mu.Lock()
	st := &n.ws
	st.sampled = true
	var began, ended bool
	r := st.refused
	compared := st.errKnown && s.errKnown // a first sample says nothing either way
	now := s.refusal(st.errs, st.errKnown)
	st.errs, st.errKnown = s.refused, s.errKnown
	switch {
	case now != liveness.RefusalNone:
		r, began = now, st.refuse(now, at, false)
	case compared && st.byReply.Before(sent):
		ended = st.accept(at)
	}
	if s.evictKnown {
		if s.evicted != st.evicted && (st.evictKnown || s.evicted > 0) {
			// A first sample cannot tell whether any was just before it.
			st.evictedAt = at
		}
		st.evicted, st.evictKnown = s.evicted, true
	}
	n.mu.Unlock()
	if n.owner != nil && (began || ended) {
		n.owner.logWrites(n, r, began)
	}
}

// sampleCmds is one sample's command, queued on a pipeline to the node.
type sampleCmds struct {
	n    *nodeWatch
	sent time.Time
	info *redis.StringCmd
}

// queueSample queues a sample of n on pipe, if one is due.
func queueSample(ctx context.Context, pipe redis.Pipeliner, n *nodeWatch) *sampleCmds {
	now := time.Now()
	if !n.claimSample(now) {
		return nil
	}
	return &sampleCmds{n: n, sent: now, info: pipe.Info(ctx, infoSections...)}
}

// record reads the sample's answer, at at. INFO refused (an ACL user
// without +info) is asked again after noInfoRetry.
func (s *sampleCmds) record(at time.Time) {
	if s == nil {
		return
	}
	info, err := s.info.Result()
	if err != nil {
		if !unanswered(err) && !nodeDown(err) {
			s.n.mu.Lock()
			s.n.ws.next = at.Add(noInfoRetry)
			s.n.mu.Unlock()
		}
		return
	}
	s.n.sampled(parseSample(info), s.sent, at)
}

// sampleNode samples the node of client c, if due: a round trip of its
// own, for a cluster's node, whose keyless commands a cluster pipeline
// would send to any node.
func sampleNode(ctx context.Context, c *redis.Client, n *nodeWatch) {
	pipe := c.Pipeline()
	s := queueSample(ctx, pipe, n)
	if s == nil {
		return
	}
	_, _ = pipe.Exec(ctx)
	s.record(time.Now())
}

// sampleNodes samples, where due, each node of a cluster that holds the
// stream or a heartbeat key read: nothing for a single node, which the
// read's own round trip sampled.
func (w *connWatch) sampleNodes(ctx context.Context, c redis.UniversalClient, stream string, hbs map[string]liveness.HeartbeatObs) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || w.single != nil {
		return
	}
	seen := map[int]bool{}
	done := map[string]bool{}
	look := func(key string) {
		slot := HashSlot(key)
		if seen[slot] {
			return
		}
		seen[slot] = true
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return
		}
		addr := node.Options().Addr
		if !done[addr] {
			done[addr] = true
			sampleNode(ctx, node, w.node(addr))
		}
	}
	look(stream)
	for k := range hbs {
		look(k)
	}
}

// logWrites logs the start or the end of a refusal on n, at most one line
// per node every writesLogEvery: a refusal that comes and goes with each
// write does not flood the log.
func (w *connWatch) logWrites(n *nodeWatch, r liveness.Refusal, began bool) {
	log := w.log.Load()
	if log == nil {
		return
	}
	ok, suppressed := w.writesLog.Allow(n.addr)
	if !ok {
		return
	}
	args := []any{"redis", w.name, "node", n.addr}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	if began {
		log.Warn("redis refuses writes: its stale or missing heartbeats are Unknown until writes have been accepted for a max age, and hygiene pauses",
			append(args, "refusal", r.String(), "cause", r.Cause())...)
		return
	}
	log.Info("redis accepts writes again: hygiene resumes, and its heartbeats count once writes have been accepted for a max age", args...)
}

// writesLogEvery is the least time between two lines about one node's
// writes.
const writesLogEvery = 10 * time.Second

// stampWrites sets, in h, the writes of the node n as of at.
func stampWrites(n *nodeWatch, h *liveness.NodeHealth, at time.Time) {
	h.Refused, h.WritableSince, h.EvictedAt = n.writes(at)
}

// nodeOf is the watch of the node that holds key on connection name; nil
// where none is known.
func (cs *Conns) nodeOf(ctx context.Context, name, key string) *nodeWatch {
	c, ok := cs.conns[name]
	if !ok || c.watch == nil {
		return nil
	}
	if c.watch.single != nil {
		return c.watch.single
	}
	cc, ok := c.primary.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	return c.watch.node(master.Options().Addr)
}

// WritesRefused is the refusal of writes that the node holding key on
// connection name answers now, as replies and samples showed it; nil when
// none is known. It sends no command.
func (cs *Conns) WritesRefused(ctx context.Context, name, key string) *WritesRefused {
	n := cs.nodeOf(ctx, name, key)
	if n == nil {
		return nil
	}
	if r := n.refusing(time.Now()); r != liveness.RefusalNone {
		return &WritesRefused{Conn: name, Refusal: r}
	}
	return nil
}

// NoteRefused records that a write to key on connection name was refused
// with r, where no hook saw it: a script that caught its write's error.
func (cs *Conns) NoteRefused(ctx context.Context, name, key string, r liveness.Refusal) {
	if n := cs.nodeOf(ctx, name, key); n != nil && r != liveness.RefusalNone {
		n.refusedByReply(r, time.Now())
	}
}

// SampleWrites samples the writes of the node that holds key on
// connection name if a sample is due, in a round trip of its own: a
// caller that waits for writes to be accepted again, and reads nothing
// meanwhile, learns it so, at most once every sampleEvery per node.
func (cs *Conns) SampleWrites(ctx context.Context, name, key string) {
	c, ok := cs.conns[name]
	if !ok || c.watch == nil {
		return
	}
	if client, ok := c.primary.(*redis.Client); ok && c.watch.single != nil {
		sampleNode(ctx, client, c.watch.single)
		return
	}
	if cc, ok := c.primary.(*redis.ClusterClient); ok {
		if master, err := cc.MasterForKey(ctx, key); err == nil {
			sampleNode(ctx, master, c.watch.node(master.Options().Addr))
		}
	}
}

// Refusing is the refusal of writes some node of connection name answers
// now, RefusalNone when none does: a cluster's first refusing node, by
// address.
func (cs *Conns) Refusing(name string) liveness.Refusal {
	c, ok := cs.conns[name]
	if !ok || c.watch == nil {
		return liveness.RefusalNone
	}
	now := time.Now()
	if c.watch.single != nil {
		return c.watch.single.refusing(now)
	}
	c.watch.mu.Lock()
	nodes := make([]*nodeWatch, 0, len(c.watch.nodes))
	for _, n := range c.watch.nodes {
		nodes = append(nodes, n)
	}
	c.watch.mu.Unlock()
	slices.SortFunc(nodes, func(a, b *nodeWatch) int { return strings.Compare(a.addr, b.addr) })
	for _, n := range nodes {
		if r := n.refusing(now); r != liveness.RefusalNone {
			return r
		}
	}
	return liveness.RefusalNone
}
