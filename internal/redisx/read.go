package redisx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// lagEstimateScript counts the entries after the group's last-delivered-id,
// up to a cap, without sending them over the wire. It runs only when XINFO
// GROUPS answers a NULL lag (deletions inside the unread range).
var lagEstimateScript = redis.NewScript(`
local r = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
return #r
`)

// Reader reads targets over the configured connections.
type Reader struct {
	Conns *Conns
	// LagEstimateCap bounds the fallback count when lag is NULL.
	LagEstimateCap int64
}

// Fetch reads one target. In steady state that is one pipelined round trip:
// TIME, XINFO GROUPS, XINFO CONSUMERS and a GET of the heartbeat key of
// every known consumer. A second round trip happens only
// when a consumer appeared whose heartbeat was not read, or when the lag is
// NULL and must be estimated. FetchBatch reads many in the same round trips.
func (r *Reader) Fetch(ctx context.Context, t liveness.Target, known []string) (liveness.Observation, error) {
	c, ok := r.Conns.Get(t.Conn)
	if !ok {
		return liveness.Observation{}, fmt.Errorf("no redis connection named %q", t.Conn)
	}
	pipe := c.Pipeline()
	g := queueRead(ctx, pipe, nil, t, known)
	sample := r.sampleOn(ctx, pipe, t.Conn)
	if err := exec(ctx, pipe); err != nil {
		return liveness.Observation{}, fmt.Errorf("read %s: %w", t, err)
	}
	readAt := time.Now()
	sample.record(readAt)
	obs, more, err := r.collect(ctx, g, readAt)
	if err != nil || !more {
		return obs, err
	}
	pipe = c.Pipeline()
	s := r.queueSecond(ctx, pipe, t, known, &obs)
	if s != nil {
		if err := exec(ctx, pipe); err != nil {
			return obs, fmt.Errorf("read %s: %w", t, err)
		}
	}
	if err := r.finish(ctx, c, t, s, &obs); err != nil {
		return obs, err
	}
	return obs, nil
}

// groupRead is the first round trip's commands of one target's read.
// clock is the read's TIME, which the reads of one batch may share.
type groupRead struct {
	t         liveness.Target
	hbKeys    []string
	clock     *redis.TimeCmd
	groups    *redis.XInfoGroupsCmd
	consumers *redis.XInfoConsumersCmd
	hbCmds    map[string]*redis.StringCmd
}

// queueRead queues the first round trip of t's read on pipe; clock is the
// TIME it shares, or nil to queue its own.
func queueRead(ctx context.Context, pipe redis.Pipeliner, clock *redis.TimeCmd, t liveness.Target, known []string) *groupRead {
	if clock == nil {
		clock = pipe.Time(ctx)
	}
	g := &groupRead{t: t, hbKeys: heartbeatKeys(t.Spec, known, nil), clock: clock}
	g.groups = pipe.XInfoGroups(ctx, t.Stream)
	g.consumers = pipe.XInfoConsumers(ctx, t.Stream, t.Group)
	g.hbCmds = queueGets(ctx, pipe, g.hbKeys)
	return g
}

// sampleOn queues, after a read's GETs, the sample of whether conn's one
// node refuses writes or evicts keys: it says what held when they were
// answered. nil where the connection has no such node to sample (a
// cluster's nodes are sampled each in finish).
func (r *Reader) sampleOn(ctx context.Context, pipe redis.Pipeliner, conn string) *sampleCmds {
	w := r.Conns.conns[conn].watch
	if w == nil || w.single == nil {
		return nil
	}
	return queueSample(ctx, pipe, w.single)
}

// collect reads g's replies, which arrived at readAt, into an
// observation; more says it needs the rest of the read (queueSecond,
// finish): the stream exists.
func (r *Reader) collect(ctx context.Context, g *groupRead, readAt time.Time) (obs liveness.Observation, more bool, err error) {
	t := g.t
	obs.ReadAt = readAt
	obs.IdleFromDeliveries, obs.IdleJudgesHolders = r.Conns.IdleRule(ctx, t.Conn, t.Stream)

	now, err := g.clock.Result()
	if err != nil {
		return obs, false, fmt.Errorf("read %s: %w", t, err)
	}
	obs.ServerTime = now

	groups, err := g.groups.Result()
	switch {
	case isNoSuchKey(err):
		obs.StreamMissing = true
		return obs, false, nil
	case err != nil:
		return obs, false, fmt.Errorf("XINFO GROUPS %s: %w", t.Stream, err)
	}
	found := false
	for _, gr := range groups {
		if gr.Name == t.Group {
			found = true
			obs.LastDeliveredID = gr.LastDeliveredID
			obs.Lag, obs.LagValid = gr.Lag, gr.Lag >= 0
			// Every pending entry, those released with XNACK (no
			// consumer's) included.
			obs.PendingTotal = gr.Pending
		}
	}
	if !found {
		// KEDA's lagCount counts a group not created yet as lagging by the
		// stream's length, the lag it would have from the start: what
		// starts the first worker of a moved trigger, which creates the
		// group. An XLEN in the second round trip, only while the group is
		// missing, batched with the other reads' second commands.
		obs.GroupMissing = true
		return obs, true, nil
	}

	consumers, err := g.consumers.Result()
	if err != nil {
		if IsGroupMissing(err) || isNoSuchKey(err) {
			obs.GroupMissing = true
			return obs, false, nil
		}
		return obs, false, fmt.Errorf("XINFO CONSUMERS %s %s: %w", t.Stream, t.Group, err)
	}
	obs.Consumers = make([]liveness.ConsumerObs, len(consumers))
	// A consumer's pending count is its own PEL's length, as the XPENDING
	// summary lists it for each consumer holding entries: the summary
	// would cost Redis a command more per read for the same numbers.
	obs.PendingByConsumer = make(map[string]int64, len(consumers))
	for i, cs := range consumers {
		// Redis 7.2 added `inactive` (since the last read that delivered;
		// -1 if none did) and made `idle` count from the last read attempt.
		// Before 7.2 there is no inactive field (go-redis leaves 0) and
		// idle counts from the last read that delivered, so an idle of 0
		// means a delivery just now on every version. Anything else without
		// a positive inactive is unknown (-1). Valkey 8.0 behaves as 7.2;
		// internal/redisx/versions_test.go pins both behaviors.
		inactive := time.Duration(-1)
		if cs.Inactive > 0 || (cs.Inactive == 0 && cs.Idle == 0) {
			inactive = cs.Inactive
		}
		obs.Consumers[i] = liveness.ConsumerObs{Name: cs.Name, Pending: cs.Pending, Idle: cs.Idle, Inactive: inactive}
		if cs.Pending > 0 {
			obs.PendingByConsumer[cs.Name] = cs.Pending
		}
	}

	obs.Heartbeats = make(map[string]liveness.HeartbeatObs, len(g.hbKeys))
	collectGets(g.hbCmds, obs.Heartbeats)
	return obs, true, nil
}

// finish ends a read whose first round trip found the stream: the second
// round trip's replies (s, nil if none was needed), the type of heartbeat
// keys of the wrong type, and when each node was readable.
func (r *Reader) finish(ctx context.Context, c redis.UniversalClient, t liveness.Target, s *secondRead, obs *liveness.Observation) error {
	if s != nil {
		if err := s.collect(t, r.LagEstimateCap, obs); err != nil {
			return err
		}
	}
	if obs.GroupMissing {
		return nil
	}
	nameWrongTypes(ctx, c, obs.Heartbeats)
	if w := r.Conns.conns[t.Conn].watch; w != nil {
		w.sampleNodes(ctx, c, t.Stream, obs.Heartbeats)
		w.stamp(ctx, c, t.Stream, obs, obs.ReadAt)
	}
	return nil
}

// Confirm reads heartbeat keys of t's connection and Redis's clock in one
// pipelined round trip: the look at a heartbeat's deadline, which a beat
// written again decides without a read of the group (liveness.Confirmer).
func (r *Reader) Confirm(ctx context.Context, t liveness.Target, keys []string) (liveness.Observation, error) {
	c, ok := r.Conns.Get(t.Conn)
	if !ok {
		return liveness.Observation{}, fmt.Errorf("no redis connection named %q", t.Conn)
	}
	var obs liveness.Observation
	pipe := c.Pipeline()
	timeCmd := pipe.Time(ctx)
	cmds := queueGets(ctx, pipe, keys)
	if err := exec(ctx, pipe); err != nil {
		return obs, fmt.Errorf("read the heartbeats of %s: %w", t, err)
	}
	obs.ReadAt = time.Now()
	now, err := timeCmd.Result()
	if err != nil {
		return obs, fmt.Errorf("read the heartbeats of %s: %w", t, err)
	}
	obs.ServerTime = now
	obs.Heartbeats = make(map[string]liveness.HeartbeatObs, len(keys))
	collectGets(cmds, obs.Heartbeats)
	return obs, nil
}

// maxTypeReads bounds the TYPE calls one read makes for heartbeat keys of
// the wrong type; the rest are reported without their type.
const maxTypeReads = 64

// nameWrongTypes replaces the WRONGTYPE error of each heartbeat key that
// holds another type than a string by that type, read with TYPE in one
// more round trip. A heartbeat key of the wrong type is a misconfiguration
// (or a key that was never a heartbeat), so the round trip is rare; its
// reason names the type and never the value.
func nameWrongTypes(ctx context.Context, c redis.UniversalClient, hbs map[string]liveness.HeartbeatObs) {
	var keys []string
	for k, r := range hbs {
		if r.Err != nil && redis.HasErrorPrefix(r.Err, "WRONGTYPE") {
			hbs[k] = liveness.HeartbeatObs{Exists: true, Err: liveness.NotAString{}}
			if len(keys) < maxTypeReads {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.StatusCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Type(ctx, k)
	}
	_ = exec(ctx, pipe)
	for i, k := range keys {
		if typ, err := cmds[i].Result(); err == nil {
			hbs[k] = liveness.HeartbeatObs{Exists: true, Err: liveness.NotAString{Type: typ}}
		}
	}
}

// secondRead is what a second round trip asks for: the heartbeat keys
// of consumers the first could not know of, the lag where XINFO GROUPS
// answered NULL, and the stream's length where the group is missing.
type secondRead struct {
	gets   map[string]*redis.StringCmd
	lag    *redis.Cmd
	length *redis.IntCmd
}

// queueSecond queues on pipe what the first round trip of t's read could
// not know to ask for; nil when nothing is. known is the consumers whose
// heartbeat keys the first round trip asked for.
func (r *Reader) queueSecond(ctx context.Context, pipe redis.Pipeliner, t liveness.Target, known []string, obs *liveness.Observation) *secondRead {
	if obs.GroupMissing {
		return &secondRead{length: pipe.XLen(ctx, t.Stream)}
	}
	var missing []string
	if !keysAllRead(t.Spec, known, obs) {
		names := make([]string, 0, len(obs.Consumers)+len(obs.PendingByConsumer))
		for _, cs := range obs.Consumers {
			names = append(names, cs.Name)
		}
		for name := range obs.PendingByConsumer {
			names = append(names, name)
		}
		missing = heartbeatKeys(t.Spec, names, obs.Heartbeats)
	}
	if len(missing) == 0 && obs.LagValid {
		return nil
	}
	s := &secondRead{gets: queueGets(ctx, pipe, missing)}
	if !obs.LagValid {
		s.lag = lagEstimateScript.Eval(ctx, pipe, []string{t.Stream}, obs.LastDeliveredID, r.LagEstimateCap)
	}
	return s
}

// collect reads the second round trip's replies into obs.
func (s *secondRead) collect(t liveness.Target, lagCap int64, obs *liveness.Observation) error {
	if s.length != nil {
		n, err := s.length.Result()
		if err != nil {
			return fmt.Errorf("XLEN %s: %w", t.Stream, err)
		}
		obs.Lag, obs.LagValid = n, true
		return nil
	}
	collectGets(s.gets, obs.Heartbeats)
	if s.lag != nil {
		n, err := s.lag.Int64()
		if err != nil {
			return fmt.Errorf("estimate lag of %s: %w", t, err)
		}
		obs.LagEstimate, obs.LagEstimateCapped = n, n >= lagCap
	}
	return nil
}

// keysAllRead says the first round trip read the heartbeat keys of every
// consumer obs lists, as it mostly has: each was known from the read
// before, and no key was left out for MaxHeartbeatReads. It spares a read
// that finds the group as it was the keys' second listing.
func keysAllRead(spec liveness.Spec, known []string, obs *liveness.Observation) bool {
	if !spec.Heartbeat {
		return true
	}
	if len(obs.Heartbeats) >= MaxHeartbeatReads {
		return false
	}
	listed := func(name string) bool { return slices.Contains(known, name) }
	if len(known) > smallSet {
		set := make(map[string]struct{}, len(known))
		for _, k := range known {
			set[k] = struct{}{}
		}
		listed = func(name string) bool { _, ok := set[name]; return ok }
	}
	for _, cs := range obs.Consumers {
		if !listed(cs.Name) {
			return false
		}
	}
	for name := range obs.PendingByConsumer {
		if !listed(name) {
			return false
		}
	}
	return true
}

// smallSet is the size up to which a list is searched, not indexed.
const smallSet = 16

// MaxHeartbeatReads bounds the heartbeat keys one read of a target asks
// Redis for: a thousand workers with prefix matching need a few thousand;
// a crafted group of names (each costing up to liveness.MaxCandidates
// keys) cannot make one refresh read more. A consumer whose keys were not
// read is Unknown: counted as live and never reclaimed.
const MaxHeartbeatReads = 20000

// heartbeatKeys lists the heartbeat keys of consumers, leaving out the ones
// already in have, at most MaxHeartbeatReads.
func heartbeatKeys(spec liveness.Spec, consumers []string, have map[string]liveness.HeartbeatObs) []string {
	if !spec.Heartbeat {
		return nil
	}
	var seen map[string]bool // made once keys are too many to search
	keys := make([]string, 0, len(consumers))
	for _, name := range consumers {
		for _, k := range spec.HeartbeatKeys(name) {
			if _, ok := have[k]; ok || seen[k] || (seen == nil && slices.Contains(keys, k)) {
				continue
			}
			if len(keys) == MaxHeartbeatReads {
				return keys
			}
			keys = append(keys, k)
			switch {
			case seen != nil:
				seen[k] = true
			case len(keys) > smallSet:
				seen = make(map[string]bool, 2*len(keys))
				for _, k := range keys {
					seen[k] = true
				}
			}
		}
	}
	return keys
}

// exec runs a pipeline and returns an error only when the batch as a whole
// failed; each command's own error is left for the caller to read. go-redis
// stamps a batch failure on every command, except when a Redis error ends
// the connection's setup (WRONGPASS from AUTH, NOPERM on CLIENT SETNAME):
// then no command ran and each reads as a zero value with no error, which
// must not become a reported 0.
func exec(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	// A command with an error of its own shows the batch reached Redis.
	reached := slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil })
	if err != nil && !reached {
		return err
	}
	return nil
}

func queueGets(ctx context.Context, pipe redis.Pipeliner, keys []string) map[string]*redis.StringCmd {
	cmds := make(map[string]*redis.StringCmd, len(keys))
	for _, k := range keys {
		cmds[k] = pipe.Get(ctx, k)
	}
	return cmds
}

func collectGets(cmds map[string]*redis.StringCmd, into map[string]liveness.HeartbeatObs) {
	for k, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
			into[k] = liveness.HeartbeatObs{}
		case err != nil:
			into[k] = liveness.HeartbeatObs{Err: err}
		default:
			into[k] = liveness.HeartbeatObs{Value: v, Exists: true}
		}
	}
}
