package redisx

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// wakerBlock bounds one blocking XREAD; it is also the most a newly armed
// stream can wait when its arming races the start of an XREAD, and about
// the most a loop takes to notice that its slot moved to another node.
const wakerBlock = time.Second

// Waker tells when a new entry lands on a stream, within a round trip of the
// XADD, without polling: a blocking XREAD over every armed stream, on a
// connection of its own. Arming a stream interrupts the XREAD with CLIENT
// UNBLOCK so the new stream joins at once.
//
// One XREAD can only span keys one server holds, and in a Redis Cluster
// only keys of one hash slot (else CROSSSLOT). So a standalone or sentinel
// connection runs one read loop, and a cluster connection one loop per
// hash slot with armed streams, on the master serving that slot. A loop
// whose read fails (MOVED after a reshard, a failover, a dead node) asks
// the cluster for the slot's master again before it reads on, so it
// follows its slot. A FailoverClient redials the master the sentinels name.
type Waker struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless client is one
	log     *slog.Logger

	mu     sync.Mutex
	runCtx context.Context //nolint:containedctx // Run's context, for loops that start after Run
	wg     sync.WaitGroup
	loops  map[int]*wakeLoop        // by hash slot; 0 outside a cluster
	slots  map[string]int           // cluster: armed stream -> hash slot
	nodes  map[string]*redis.Client // cluster: the waker's own client per node address
}

// wakeLoop is one blocking read and the watches it serves. Its fields are
// guarded by the Waker's mu.
type wakeLoop struct {
	slot    int
	watches map[string]map[*watch]struct{}
	changed chan struct{}
	connID  int64
	node    *redis.Client // where connID lives, for CLIENT UNBLOCK
}

type watch struct {
	after string // fire on the first entry with an id above this one
	fired chan struct{}
}

// NewWaker returns a waker for one connection; Run must be running for it
// to fire.
func NewWaker(c redis.UniversalClient, log *slog.Logger) *Waker {
	cluster, _ := c.(*redis.ClusterClient)
	return &Waker{
		client: c, cluster: cluster, log: log,
		loops: make(map[int]*wakeLoop), slots: make(map[string]int), nodes: make(map[string]*redis.Client),
	}
}

// Arm returns a channel that is closed when an entry newer than the stream's
// current last entry is added, and a function to disarm it. Arm before
// reading the state you wait to see change, and no entry can slip between.
func (w *Waker) Arm(ctx context.Context, stream string) (<-chan struct{}, func(), error) {
	last, err := w.client.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return nil, nil, err
	}
	slot, err := w.slot(ctx, stream)
	if err != nil {
		return nil, nil, err
	}
	after := "0-0"
	if len(last) > 0 {
		after = last[0].ID
	}
	wt := &watch{after: after, fired: make(chan struct{})}
	w.mu.Lock()
	l := w.loopLocked(slot) //nolint:contextcheck // a loop lives as long as Run, not as the Arm call that starts it
	if l.watches[stream] == nil {
		l.watches[stream] = make(map[*watch]struct{})
	}
	l.watches[stream][wt] = struct{}{}
	w.slots[stream] = slot
	id, node := l.connID, l.node
	w.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	if id != 0 {
		// Best effort: without it the new stream joins at the next XREAD.
		_ = node.ClientUnblock(ctx, id).Err()
	}
	return wt.fired, func() { w.disarm(l, stream, wt) }, nil
}

// slot returns the stream's hash slot in a cluster, 0 otherwise. A slot
// never changes for a key, so it is asked once while the stream is armed.
func (w *Waker) slot(ctx context.Context, stream string) (int, error) {
	if w.cluster == nil {
		return 0, nil
	}
	w.mu.Lock()
	slot, ok := w.slots[stream]
	w.mu.Unlock()
	if ok {
		return slot, nil
	}
	n, err := w.cluster.ClusterKeySlot(ctx, stream).Result()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER KEYSLOT %s: %w", stream, err)
	}
	return int(n), nil
}

// loopLocked returns the slot's loop, starting one if Run is running.
func (w *Waker) loopLocked(slot int) *wakeLoop {
	l := w.loops[slot]
	if l != nil {
		return l
	}
	l = &wakeLoop{slot: slot, watches: make(map[string]map[*watch]struct{}), changed: make(chan struct{}, 1)}
	w.loops[slot] = l
	if w.runCtx != nil {
		ctx := w.runCtx
		w.wg.Go(func() { w.run(ctx, l) })
	}
	return l
}

func (w *Waker) disarm(l *wakeLoop, stream string, wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if set := l.watches[stream]; set != nil {
		delete(set, wt)
		if len(set) == 0 {
			delete(l.watches, stream)
			w.forgetLocked(stream)
		}
	}
}

// forgetLocked drops the cached slot of a stream no loop watches.
func (w *Waker) forgetLocked(stream string) {
	if slot, ok := w.slots[stream]; ok {
		if l := w.loops[slot]; l == nil || l.watches[stream] == nil {
			delete(w.slots, stream)
		}
	}
}

// Run serves armed streams until ctx ends, then closes the connections it
// opened.
func (w *Waker) Run(ctx context.Context) {
	w.mu.Lock()
	w.runCtx = ctx
	for _, l := range w.loops {
		w.wg.Go(func() { w.run(ctx, l) })
	}
	w.mu.Unlock()
	<-ctx.Done()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	for addr, c := range w.nodes {
		_ = c.Close()
		delete(w.nodes, addr)
	}
}
