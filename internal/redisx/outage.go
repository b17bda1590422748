package redisx

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/lograte"
)

// nodeWatch follows one Redis node (a server address in a cluster; the
// server a standalone or sentinel connection reaches) as pelwarden's
// commands meet it: since when it has answered without a break. A break
// is a failed command (the node refused the connection, dropped it, timed
// out, or answered LOADING, MASTERDOWN or CLUSTERDOWN) or a new server
// behind the connection: another run_id after a new connection, after a
// restart or a failover, even if no command failed. It records and
// decides nothing; liveness decides what a stretch is worth.
type nodeWatch struct {
	mu    sync.Mutex
	runID string
	// version is the server's, from the same INFO server; zero until a
	// connection's INFO answered.
	version ServerVersion
	// logged is the version last logged.
	logged ServerVersion
	// since is the start of the current stretch; zero while broken.
	since time.Time
	// broken says a break was seen: the stretch is not the first,
	// which began with pelwarden's own start.
	broken bool
	// ws is the node's writes (writes.go).
	ws writeState
	// owner and addr name the node in the log.
	owner *connWatch
	addr  string
}

// answered records a command the node answered at at.
func (n *nodeWatch) answered(at time.Time) {
	n.mu.Lock()
	if n.since.IsZero() {
		n.since = at
	}
	n.mu.Unlock()
}

func (n *nodeWatch) broke() {
	n.mu.Lock()
	n.since, n.broken = time.Time{}, true
	n.mu.Unlock()
}

// connected records the server a new connection reached, as its INFO
// server named it: a run_id other than the last is a restart or a
// failover.
func (n *nodeWatch) connected(runID string, v ServerVersion, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v != (ServerVersion{}) {
		n.version = v
	}
	if runID != "" && runID != n.runID {
		if n.runID != "" { // another server: its counts start anew
			n.broken = true
			n.ws.next, n.ws.errKnown = time.Time{}, false
		}
		n.runID, n.since = runID, at
		return
	}
	if n.since.IsZero() {
		n.since = at
	}
}

// serverVersion is the node's version; false until one was read.
func (n *nodeWatch) serverVersion() (ServerVersion, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.version, n.version != ServerVersion{}
}

// toLog is the node's version if it has not been logged yet, marking it
// logged.
func (n *nodeWatch) toLog() (ServerVersion, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.version == (ServerVersion{}) || n.version == n.logged {
		return ServerVersion{}, false
	}
	n.logged = n.version
	return n.version, true
}

// readableSince is the start of the node's current stretch, at at the
// latest: a key just read from it was readable then.
func (n *nodeWatch) readableSince(at time.Time) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.since.IsZero() || n.since.After(at) {
		return at
	}
	return n.since
}

// brokenSince is readableSince for a stretch that began with a break
// pelwarden saw, zero for the first: idle times are Redis's own count, so
// pelwarden's start says nothing of them.
func (n *nodeWatch) brokenSince(at time.Time) time.Time {
	since := n.readableSince(at)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.broken {
		return time.Time{}
	}
	return since
}

// DialHook leaves dialing to go-redis: a failed dial fails the command
// that needed it, which ProcessHook sees; onConnect asks who answers.
func (n *nodeWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records each command's answer.
func (n *nodeWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// go-redis hands a reply's error back before it sets it on cmd.
		n.saw(cmp.Or(err, cmd.Err()))
		return err
	}
}

// ProcessPipelineHook records a pipeline's answers: any command the node
// failed breaks the stretch.
func (n *nodeWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var failed error
		for _, c := range cmds {
			if r := RefusalOf(c.Err()); r != liveness.RefusalNone {
				n.refusedByReply(r, time.Now())
			}
			if failed == nil && nodeDown(c.Err()) {
				failed = c.Err()
			}
		}
		if failed == nil && nodeDown(err) {
			failed = err
		}
		n.saw(failed)
		return err
	}
}

func (n *nodeWatch) saw(err error) {
	switch {
	case nodeDown(err):
		n.broke()
	case !unanswered(err):
		n.answered(time.Now())
	}
	if r := RefusalOf(err); r != liveness.RefusalNone {
		n.refusedByReply(r, time.Now())
	}
}

// nodeDown says err shows the node out of reach or not serving: the
// transport failed, or Redis answered that it cannot serve yet.
func nodeDown(err error) bool {
	if err == nil || unanswered(err) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return redis.HasErrorPrefix(err, "LOADING") || redis.HasErrorPrefix(err, "MASTERDOWN") || redis.HasErrorPrefix(err, "CLUSTERDOWN")
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unanswered says err came before the command reached the node: a caller
// that gave up, a full pool, a closed client. It proves nothing either way.
func unanswered(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// connWatch follows the nodes of one connection. A standalone or sentinel
// connection has one (a failover shows as a new run_id); a cluster has one
// per node address, and a slot whose master changed starts a stretch of
// its own, since its keys were out of reach between the two masters.
type connWatch struct {
	// name is the connection's, for the version log.
	name string
	// single is nil for a cluster; label names its node in the version
	// log (the address, or the sentinels' master name).
	single *nodeWatch
	label  string
	// sentinel says the connection finds its master through sentinels.
	sentinel bool
	log      atomic.Pointer[slog.Logger]
	// writesLog limits the lines about the nodes' writes (writes.go).
	writesLog *lograte.Limiter

	mu    sync.Mutex
	nodes map[string]*nodeWatch // cluster: by address
	slots map[int]slotMaster    // cluster: the master each slot was read from
}

type slotMaster struct {
	addr string
	// changed is when another master was first seen serving the slot;
	// zero if none was.
	changed time.Time
}

func newConnWatch(c config.Redis) *connWatch {
	w := &connWatch{name: c.Name, label: c.Addr, writesLog: lograte.New(writesLogEvery, nil)}
	switch c.Mode {
	case config.RedisCluster:
		w.label, w.nodes, w.slots = "", make(map[string]*nodeWatch), make(map[int]slotMaster)
		return w
	case config.RedisSentinel:
		w.label, w.sentinel = c.Sentinel.MasterName, true
	case config.RedisStandalone:
	}
	w.single = &nodeWatch{owner: w, addr: w.label}
	return w
}

// node is the watch of the cluster node at addr.
func (w *connWatch) node(addr string) *nodeWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ok := w.nodes[addr]
	if !ok {
		n = &nodeWatch{owner: w, addr: addr}
		w.nodes[addr] = n
	}
	return n
}

// follow hooks a standalone or sentinel client into the watch; a nil
// watch follows nothing. A FailoverClient's hooks see its master's
// connections only, never a sentinel's.
func (w *connWatch) follow(c *redis.Client) *redis.Client {
	if w != nil && w.single != nil {
		c.AddHook(w.single)
	}
	return c
}

// connectHook is the OnConnect of a standalone or sentinel client; nil for
// a nil watch or a cluster's.
func (w *connWatch) connectHook() func(context.Context, *redis.Conn) error {
	if w == nil || w.single == nil {
		return nil
	}
	return w.onConnect(w.single, w.label)
}

// newNode is a cluster's NewClient: each node client asks who answers on
// its new connections and is hooked into the watch of its address. nil
// (go-redis's own) for a nil watch.
func (w *connWatch) newNode() func(*redis.Options) *redis.Client {
	if w == nil || w.single != nil {
		return nil
	}
	return func(opt *redis.Options) *redis.Client {
		n := w.node(opt.Addr)
		opt.OnConnect = w.onConnect(n, opt.Addr)
		c := redis.NewClient(opt)
		c.AddHook(n)
		return c
	}
}

// stamp sets, in obs, since when the node of the stream and of each
// heartbeat key read has been readable, as of at. In a cluster that is
// per slot, from go-redis's slot map: no command is sent.
func (w *connWatch) stamp(ctx context.Context, c redis.UniversalClient, stream string, obs *liveness.Observation, at time.Time) {
	if w.single != nil {
		health := liveness.NodeHealth{ReadableSince: w.single.readableSince(at)}
		obs.StreamReadableSince = w.single.brokenSince(at)
		stampWrites(w.single, &health, at)
		obs.StreamRefused, obs.StreamWritableSince = health.Refused, health.WritableSince
		if len(obs.Heartbeats) == 0 {
			return
		}
		node := new(health)
		for k, h := range obs.Heartbeats {
			h.Node = node
			obs.Heartbeats[k] = h
		}
		return
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return
	}
	bySlot := make(map[int]slotSince)
	s := w.slotSince(ctx, cc, stream, at, bySlot)
	obs.StreamReadableSince = s.broken
	if s.node != nil {
		var writes liveness.NodeHealth
		stampWrites(s.node, &writes, at)
		obs.StreamRefused, obs.StreamWritableSince = writes.Refused, writes.WritableSince
	}
	for k, h := range obs.Heartbeats {
		s := w.slotSince(ctx, cc, k, at, bySlot)
		node := &liveness.NodeHealth{ReadableSince: s.readable}
		if s.node != nil {
			stampWrites(s.node, node, at)
		}
		h.Node = node
		obs.Heartbeats[k] = h
	}
}

// slotSince is a slot's readableSince and brokenSince, and the watch of
// its master's node (nil when the slot map did not say).
type slotSince struct {
	readable, broken time.Time
	node             *nodeWatch
}

// slotSince is since when key's slot has been readable: since its master
// answered without a break, and since that master took the slot over.
func (w *connWatch) slotSince(ctx context.Context, cc *redis.ClusterClient, key string, at time.Time, memo map[int]slotSince) slotSince {
	slot := HashSlot(key)
	if since, ok := memo[slot]; ok {
		return since
	}
	since := slotSince{readable: at, broken: at}
	if master, err := cc.MasterForKey(ctx, key); err == nil {
		addr := master.Options().Addr
		w.mu.Lock()
		sm, seen := w.slots[slot]
		if seen && sm.addr != addr {
			sm.changed = at
		}
		sm.addr = addr
		w.slots[slot] = sm
		w.mu.Unlock()
		n := w.node(addr)
		since = slotSince{readable: n.readableSince(at), broken: n.brokenSince(at), node: n}
		if sm.changed.After(since.readable) {
			since.readable = sm.changed
		}
		if sm.changed.After(since.broken) {
			since.broken = sm.changed
		}
	}
	memo[slot] = since
	return since
}
