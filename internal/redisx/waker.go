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
// A stream is armed once however many wait on it: every Arm of a stream
// that is already armed and has not fired joins that one watch, at no
// Redis command, and one entry fires them all. So the Redis cost of a wake
// (the XREAD's answer, one XREVRANGE and one CLIENT UNBLOCK to arm again)
// is per stream, never per waiter.
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

	mu      sync.Mutex
	runCtx  context.Context //nolint:containedctx // Run's context, for loops that start after Run
	wg      sync.WaitGroup
	loops   map[int]*wakeLoop        // by hash slot; 0 outside a cluster
	watches map[string]*streamWatch  // the one watch of each stream being armed or armed, not yet fired
	slots   map[string]int           // cluster: armed stream -> hash slot
	nodes   map[string]*redis.Client // cluster: the waker's own client per node address
}

// wakeLoop is one blocking read and the watches it serves. Its fields are
// guarded by the Waker's mu.
type wakeLoop struct {
	slot    int
	watches map[string]*streamWatch
	changed chan struct{}
	connID  int64
	node    *redis.Client // where connID lives, for CLIENT UNBLOCK
}

// streamWatch is a stream's one watch, shared by every Wake of it. Its
// fields other than the channels are guarded by the Waker's mu, and after
// and armedAt are set before ready closes.
type streamWatch struct {
	stream  string
	after   string    // fire on the first entry with an id above this one
	armedAt time.Time // after the XREVRANGE that read after had its answer
	firedAt time.Time // when an entry above after was read; set before fired closes
	ready   chan struct{}
	err     error // why arming failed; set before ready closes
	fired   chan struct{}
	holders int
	loop    *wakeLoop // nil until armed
}

// Wake is one waiter's hold on its stream's watch.
type Wake struct {
	w    *Waker
	sw   *streamWatch
	once sync.Once
}

// C is closed when an entry newer than the stream's last one at Armed is
// added.
func (k *Wake) C() <-chan struct{} { return k.sw.fired }

// Armed is when the watch began: every entry added after it closes C. A
// read that starts after Armed misses nothing between itself and the
// wake.
func (k *Wake) Armed() time.Time { return k.sw.armedAt }

// Fired is when the entry that closed C was read from Redis: a read that
// starts after it sees the entry. Zero until C is closed.
func (k *Wake) Fired() time.Time {
	select {
	case <-k.sw.fired:
		return k.sw.firedAt
	default:
		return time.Time{}
	}
}

// Stop lets go of the watch; the stream is disarmed when its last holder
// stops. It may be called more than once.
func (k *Wake) Stop() { k.once.Do(func() { k.w.release(k.sw) }) }

// NewWaker returns a waker for one connection; Run must be running for it
// to fire.
func NewWaker(c redis.UniversalClient, log *slog.Logger) *Waker {
	cluster, _ := c.(*redis.ClusterClient)
	return &Waker{
		client: c, cluster: cluster, log: log,
		loops: make(map[int]*wakeLoop), watches: make(map[string]*streamWatch),
		slots: make(map[string]int), nodes: make(map[string]*redis.Client),
	}
}

// Arm returns a hold on a watch that fires when an entry newer than the
// stream's current last entry is added. Arm before reading the state you
// wait to see change, and read it from a read that starts after Armed: no
// entry can slip between. A stream already armed is joined without a
// Redis command.
func (w *Waker) Arm(ctx context.Context, stream string) (*Wake, error) {
	w.mu.Lock()
	sw, joined := w.watches[stream]
	if !joined {
		sw = &streamWatch{stream: stream, ready: make(chan struct{}), fired: make(chan struct{})}
		w.watches[stream] = sw
	}
	sw.holders++
	w.mu.Unlock()
	k := &Wake{w: w, sw: sw}
	if !joined {
		w.arm(ctx, sw)
	}
	select {
	case <-sw.ready:
	case <-ctx.Done():
		k.Stop()
		return nil, ctx.Err()
	}
	if sw.err != nil {
		k.Stop()
		return nil, sw.err
	}
	return k, nil
}

// arm reads the stream's last id and hands the watch to its slot's loop;
// whatever happens, it closes ready.
func (w *Waker) arm(ctx context.Context, sw *streamWatch) {
	after, slot, err := w.lastID(ctx, sw.stream)
	armedAt := time.Now()
	w.mu.Lock()
	if err != nil {
		sw.err = err
		if w.watches[sw.stream] == sw {
			delete(w.watches, sw.stream)
		}
		w.mu.Unlock()
		close(sw.ready)
		return
	}
	sw.after, sw.armedAt = after, armedAt
	l := w.loopLocked(slot) //nolint:contextcheck // a loop lives as long as Run, not as the Arm call that starts it
	sw.loop = l
	l.watches[sw.stream] = sw
	w.slots[sw.stream] = slot
	id, node := l.connID, l.node
	w.mu.Unlock()
	close(sw.ready)
	select {
	case l.changed <- struct{}{}:
	default:
	}
	if id != 0 {
		// Best effort: without it the new stream joins at the next XREAD.
		_ = node.ClientUnblock(ctx, id).Err()
	}
}

// lastID returns the stream's last entry id ("0-0" when it has none) and
// its hash slot.
func (w *Waker) lastID(ctx context.Context, stream string) (string, int, error) {
	last, err := w.client.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", 0, err
	}
	slot, err := w.slot(ctx, stream)
	if err != nil {
		return "", 0, err
	}
	if len(last) == 0 {
		return "0-0", slot, nil
	}
	return last[0].ID, slot, nil
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
	l = &wakeLoop{slot: slot, watches: make(map[string]*streamWatch), changed: make(chan struct{}, 1)}
	w.loops[slot] = l
	if w.runCtx != nil {
		ctx := w.runCtx
		w.wg.Go(func() { w.run(ctx, l) })
	}
	return l
}

// release drops one holder of sw; the last one disarms the stream, unless
// the watch has fired already and is no longer armed.
func (w *Waker) release(sw *streamWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sw.holders--
	if sw.holders > 0 {
		return
	}
	if w.watches[sw.stream] == sw {
		delete(w.watches, sw.stream)
	}
	if l := sw.loop; l != nil && l.watches[sw.stream] == sw {
		delete(l.watches, sw.stream)
		w.forgetLocked(sw.stream)
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

// ArmedStreams is the number of streams armed, however many wait on each.
func (w *Waker) ArmedStreams() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
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
