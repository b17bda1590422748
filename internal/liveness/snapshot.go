package liveness

import (
	"fmt"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// GroupRef names one consumer group on a configured Redis connection. It is
// the one identity of a group: events, metrics labels, leases, the Admin
// API and the hygiene loop all key by it.
type GroupRef struct {
	// Conn is the name of a configured Redis connection.
	Conn   string
	Stream string
	Group  string
}

func (g GroupRef) String() string {
	return fmt.Sprintf("%s/%s/%s", g.Conn, g.Stream, g.Group)
}

// LabelNames are the Prometheus label names of a group, in the order
// Labels gives their values.
var LabelNames = []string{"redis", "stream", "group"}

// MaxLabelValue bounds every label value pelwarden puts on /metrics whose
// text a caller chose (a stream, group, liveness settings, a pod
// selector), in bytes. A name of a thousand bytes would repeat in every
// series of its target, tens of kilobytes a target; cut by clip.Unique,
// the start stays readable and two names cut alike stay two series.
const MaxLabelValue = 128

// LabelValue is s as a label value: itself, or cut to MaxLabelValue with
// a hash of the whole, its control and bidirectional bytes escaped
// (clip.Label).
func LabelValue(s string) string { return clip.Label(s, MaxLabelValue) }

// Labels are the group's Prometheus label values, each a LabelValue, then
// extra ones as they are.
func (g GroupRef) Labels(extra ...string) []string {
	return append([]string{LabelValue(g.Conn), LabelValue(g.Stream), LabelValue(g.Group)}, extra...)
}

// LabelMap is the group's labels by name, to match or delete its series.
func (g GroupRef) LabelMap() map[string]string {
	v := g.Labels()
	return map[string]string{LabelNames[0]: v[0], LabelNames[1]: v[1], LabelNames[2]: v[2]}
}

// Target is one consumer group with the rule its consumers are judged by.
type Target struct {
	GroupRef
	Spec Spec
}

// Key identifies a target; requests with equal keys share one snapshot.
func (t Target) Key() string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s", t.Conn, t.Stream, t.Group, t.Spec)
}

// SameKey reports whether a and b have equal Keys, without building them:
// a holder that compares on every read keeps no key string.
func SameKey(a, b Target) bool { return keyOf(a) == keyOf(b) }

// ConsumerObs is one row of XINFO CONSUMERS.
type ConsumerObs struct {
	Name    string
	Pending int64
	// Idle is the time since the last read attempt.
	Idle time.Duration
	// Inactive is the time since the last successful read, -1 where Redis
	// (before 7.2) does not report it or the consumer never read.
	Inactive time.Duration
}

// HeartbeatObs is the read of one heartbeat key.
type HeartbeatObs struct {
	Value  string
	Exists bool
	// Err is set when the read of this key failed.
	Err error
	// Node is the health of the Redis node holding the key, one value
	// shared by the keys a read found on that node; nil where the fetcher
	// does not follow nodes: the key is judged as if its node never broke.
	Node *NodeHealth
}

// Health is the health of the key's node: h.Node, or that of a node that
// never broke.
func (h HeartbeatObs) Health() NodeHealth {
	if h.Node == nil {
		return NodeHealth{}
	}
	return *h.Node
}

// NodeHealth is what pelwarden followed of one Redis node, as of a read.
type NodeHealth struct {
	// ReadableSince is when the node became readable again, on this
	// process's clock: the start of the stretch in which pelwarden read
	// it without an error, a failover or a restart (or since pelwarden
	// first read it). Zero: as if it never broke.
	ReadableSince time.Time
	// Refused is the refusal of writes the node answers now, if
	// WritableSince is zero, or last answered before it accepted writes
	// again at WritableSince; RefusalNone where it was never seen to
	// refuse them.
	Refused       Refusal
	WritableSince time.Time
	// EvictedAt is when the node was last seen to evict keys (its
	// evicted_keys rose), on this process's clock; zero if never.
	EvictedAt time.Time
}

// Observation is what one refresh read from Redis, raw.
type Observation struct {
	// ServerTime is Redis's clock at the read; heartbeat ages use it so the
	// clock of the host pelwarden runs on does not matter.
	ServerTime time.Time
	// ReadAt is when the reply carrying XINFO CONSUMERS and the heartbeats
	// arrived, on this process's clock: idle times and heartbeat ages are
	// as of then at the latest. Zero where the fetcher does not say.
	ReadAt        time.Time
	StreamMissing bool
	GroupMissing  bool
	// LastDeliveredID is the group's last-delivered-id.
	LastDeliveredID string
	// Lag is XINFO GROUPS lag, valid when LagValid.
	Lag      int64
	LagValid bool
	// LagEstimate is the fallback when lag is NULL: the entries after
	// last-delivered-id, counted up to a cap.
	LagEstimate int64
	// LagEstimateCapped says the count stopped at the cap.
	LagEstimateCapped bool
	Consumers         []ConsumerObs
	// PendingByConsumer is the pending count of each consumer holding
	// entries, as the XPENDING summary gives it.
	PendingByConsumer map[string]int64
	// PendingTotal is the group's PEL length (XINFO GROUPS pending): every
	// pending entry, those released with XNACK (Redis 8.8), which no
	// consumer holds and the per-consumer counts leave out, included. Zero
	// where the fetcher does not say.
	PendingTotal int64
	// Heartbeats maps a key to its read; keys not present were not read.
	Heartbeats map[string]HeartbeatObs
	// Pods is what the kubernetes source saw; nil where it was not asked.
	Pods *PodsObs
	// IdleFromDeliveries says the server's XINFO CONSUMERS idle counts
	// from the last read that delivered entries (Redis before 7.2), not
	// from the last read attempt: a worker polling an empty stream while
	// holding entries ages as if dead.
	IdleFromDeliveries bool
	// IdleJudgesHolders says the operator lets idle alone judge consumers
	// holding entries even so (redis[].idleBefore72: ghost).
	IdleJudgesHolders bool
	// StreamReadableSince is NodeHealth.ReadableSince for the node
	// holding the stream, whose idle times the idle source reads, but only
	// after a break pelwarden saw: Redis counts idle times itself, so
	// pelwarden's own start casts no doubt on them. Zero where there was
	// none, or the fetcher does not follow nodes.
	StreamReadableSince time.Time
	// StreamRefused and StreamWritableSince are NodeHealth.Refused and
	// WritableSince for the node holding the stream.
	StreamRefused       Refusal
	StreamWritableSince time.Time
}

// PodsObs is the kubernetes source's view of a target's owner candidates.
type PodsObs struct {
	// Err says why the source cannot answer (its cache not current, RBAC
	// refusing); empty when it can.
	Err string
	// ByName holds the known pods among the owner candidates: those that
	// exist and those seen to go. A candidate not listed has no pod.
	ByName map[string]PodObs
}

// PodObs is one pod as the kubernetes source knows it.
type PodObs struct {
	// State is PodRunning, PodTerminating or PodGone.
	State PodState
	// GoneAt is when the source saw the pod go, on pelwarden's clock.
	GoneAt   time.Time
	Restarts int32
	// NameUnique says the pod's controller never gives its name to another
	// pod (a ReplicaSet): once it went, no grace is needed.
	NameUnique bool
}

// ConsumerView is one consumer with its verdict.
type ConsumerView struct {
	Name string
	// Owner is the resolved owner, empty when none matched.
	Owner    string
	Pending  int64
	Idle     time.Duration
	Inactive time.Duration
	Verdict  Verdict
	Reasons  []Reason
	// HeartbeatAge is the age of the consumer's heartbeat, -1 where none
	// was read.
	HeartbeatAge time.Duration
	// Heartbeat is what the heartbeat source saw of the consumer.
	Heartbeat HeartbeatState
	// Pod is the kubernetes source's state of the owner's pod.
	Pod PodState
	// SharedName says the name was used after its pod went.
	SharedName bool
	// IdleUndecided says the consumer holds entries and only its idle
	// time could have judged it, on a server whose idle counts delivering
	// reads only: it is Unknown.
	IdleUndecided bool
	// GoneAt is when the owner's pod went, for a Ghost judged so from its
	// pod; zero otherwise.
	GoneAt time.Time
	// FirstSeen is when pelwarden first saw the consumer in the group, on
	// its own clock; it is carried from snapshot to snapshot and forgotten
	// with the consumer.
	FirstSeen time.Time
	// AliveAt is when pelwarden last judged the consumer Alive or Degraded
	// on its own evidence, carried like FirstSeen; zero if never. The
	// disruption breaker counts who turned Ghost together by it.
	AliveAt time.Time
	// Held says the disruption breaker holds the consumer Unknown: its
	// evidence alone would make it a Ghost.
	Held bool
	// rule is the verdict table's row that decided, plus one; 0 where
	// none did (pelwarden's own holder).
	rule uint8
	// ClockSkew is Heartbeat.Skew: how far the worker's clock is off, as
	// last measured (clock.go); 0 where it was not.
	ClockSkew time.Duration

	// beat is what the snapshot remembers of the heartbeat read, for the
	// next read to judge it on Redis's clock.
	beat beatMemo
}

// Snapshot is the judged state of one target at one moment. It is immutable
// once built and shared by everyone who reads the target.
type Snapshot struct {
	// Target is the view's own copy, shared by every snapshot of the
	// target rather than copied into each: 10k targets read every two
	// seconds would otherwise keep and churn 1.7 MB of copies.
	Target *Target
	// At is the local time the snapshot was built.
	At            time.Time
	ServerTime    time.Time
	StreamMissing bool
	GroupMissing  bool
	// Consumers are sorted by name.
	Consumers []ConsumerView
	// LivePending is the pending entries held by Alive or Unknown consumers:
	// what the scaler counts.
	LivePending int64
	// GhostPending is the pending entries held by Ghost consumers.
	GhostPending   int64
	UnknownPending int64
	// HeldPending is the entries pelwarden's dead-letter holder holds on
	// their way to the dead-letter stream: no worker's work, so left out
	// of LivePending, and shown apart.
	HeldPending int64
	// DegradedPending is the pending entries held by Degraded consumers;
	// like a ghost's, they are left out of LivePending.
	DegradedPending int64
	// ReleasedPending is the entries released with XNACK (Redis 8.8):
	// pending with no owner until a reader that claims takes them. They
	// are work, never ghost-held: the scaler counts them beside
	// LivePending, as KEDA's own scaler does, and hygiene never touches
	// them.
	ReleasedPending   int64
	GhostConsumers    int
	DegradedConsumers int
	// NoHeartbeatRecords says heartbeats are configured but no consumer of
	// the group has a heartbeat record: every consumer is judged Unknown.
	NoHeartbeatRecords bool
	// FutureHeartbeats counts consumers whose heartbeat is dated in the
	// future beyond FutureTolerance.
	FutureHeartbeats int
	// SkewedClocks counts consumers whose worker's clock is off by more
	// than FutureTolerance (ConsumerView.ClockSkew), and ClockSkew is the
	// largest of their skews, signed; judged on Redis's clock, none of
	// them is a death.
	SkewedClocks int
	ClockSkew    time.Duration
	// Refused is the refusal of writes a node this read touched (the
	// stream's, or a heartbeat key's) answers now; RefusalNone when none
	// does. RefusedConsumers counts the consumers Unknown because writes
	// were refused lately, EvictedConsumers those whose missing key may
	// have been evicted.
	Refused                            Refusal
	RefusedConsumers, EvictedConsumers int
	// Lag is XINFO GROUPS lag or, when LagEstimated, the fallback estimate.
	Lag             int64
	LagEstimated    bool
	LastDeliveredID string
	// PodsErr says why the kubernetes source could not answer for this
	// read (its cache not current, RBAC refusing); empty when it answered
	// or is not configured.
	PodsErr string
	// Breaker is the target's disruption breaker, carried from snapshot to
	// snapshot; nil while it is at rest (BreakerState reads it). Its
	// state is kept apart because it is almost always at rest: a
	// hundred bytes in every snapshot of every target otherwise.
	Breaker *BreakerState
	// nextChange is NextChange (deadline.go); groupChange is the earliest
	// deadline besides the lapses of heartbeats a read of their keys can
	// decide (confirm.go).
	nextChange, groupChange time.Time
}

// gatheredPool holds the evidence buffers of Build: each target a read
// settles gathers its consumers' evidence, and only their views outlive
// the build.
var gatheredPool = sync.Pool{New: func() any { return new([]gathered) }}

// gathered is one consumer's evidence before the group-wide guard is known.
type gathered struct {
	view ConsumerView
	ev   Evidence
}

// Build judges every consumer of an observation. prev is the target's
// previous snapshot (nil for the first): it carries when each consumer was
// first seen, for the start grace, when each was last Alive and the
// disruption breaker. Build is pure; the snapshot keeps t, which must not
// change afterwards (the view's entry never changes it). It trips the
// breaker at DefaultBreaker; BuildWith takes another.
func Build(t *Target, obs Observation, prev *Snapshot, now time.Time) *Snapshot {
	return BuildWith(t, obs, prev, now, DefaultBreaker)
}

// BuildWith is Build with the disruption breaker's threshold b.
func BuildWith(t *Target, obs Observation, prev *Snapshot, now time.Time, b Breaker) *Snapshot {
	return build(t, obs, consumerRows(obs), prev, now, b)
}

// build is BuildWith with the observation's consumerRows, which the
// targets judged from one read share.
func build(t *Target, obs Observation, rows []consumerRow, prev *Snapshot, now time.Time, b Breaker) *Snapshot {
	s := &Snapshot{
		Target:          t,
		At:              now,
		ServerTime:      obs.ServerTime,
		StreamMissing:   obs.StreamMissing,
		GroupMissing:    obs.GroupMissing,
		LastDeliveredID: obs.LastDeliveredID,
		Lag:             obs.Lag,
	}
	if obs.StreamMissing || obs.GroupMissing {
		// A missing group has nothing to judge; its lag is the stream's
		// length where the reader counted it, as KEDA's lagCount does.
		if obs.StreamMissing || !obs.LagValid {
			s.Lag = 0
		}
		return s
	}
	if !obs.LagValid {
		s.Lag, s.LagEstimated = obs.LagEstimate, true
	}
	s.ReleasedPending = released(obs)
	if t.Spec.Kubernetes && obs.Pods != nil {
		s.PodsErr = obs.Pods.Err
	}
	s.Refused = refusedNow(obs)
	var before []ConsumerView
	var breaker BreakerState
	if prev != nil {
		before, breaker = prev.Consumers, prev.BreakerState()
	}
	buf := gatheredPool.Get().(*[]gathered)
	all := gather(t.Spec, obs, rows, before, now, (*buf)[:0])
	defer func() {
		clear(all)
		*buf = all[:0]
		gatheredPool.Put(buf)
	}()
	s.NoHeartbeatRecords = noHeartbeatRecords(t.Spec, all)
	s.Consumers = make([]ConsumerView, 0, len(all))
	// The consumers' reasons share one array, each its own share of it
	// (a reason more than its share, such as the breaker's, moves it out).
	per := reasonsOf(t.Spec)
	reasons := make([]Reason, per*len(all))
	judged := all[:0]
	for _, g := range all {
		if IsHolder(g.view.Name) {
			s.addHolder(g.view)
			continue
		}
		g.ev.NoGroupHeartbeats = s.NoHeartbeatRecords
		var j Judgement
		if g.ev.Listed {
			k := len(judged) * per
			j = judgeListed(t.Spec, g.ev, reasons[k:k:k+per])
		} else {
			j = Judge(t.Spec, g.ev)
		}
		cv := &g.view
		cv.Verdict, cv.Reasons, cv.SharedName, cv.IdleUndecided, cv.rule = j.Verdict, j.Reasons, j.SharedName, j.IdleUndecided, j.rule
		if j.Verdict == Ghost && g.ev.Pod.State == PodGone {
			cv.GoneAt = now.Add(-g.ev.Pod.GoneFor)
		}
		judged = append(judged, g)
	}
	s.setBreaker(b.apply(t.Spec, breaker, judged, obs.ServerTime, now), prev)
	for _, g := range judged {
		s.add(g.view)
	}
	s.deadlines(t.Spec, judged, now)
	return s
}

// BreakerState is the target's disruption breaker; the zero state when
// it is at rest.
func (s *Snapshot) BreakerState() BreakerState {
	if s.Breaker == nil {
		return BreakerState{}
	}
	return *s.Breaker
}

// setBreaker keeps st, the breaker's state after this read: none at rest,
// and prev's own while it is unchanged, so a tripped breaker is not copied
// into every read.
func (s *Snapshot) setBreaker(st BreakerState, prev *Snapshot) {
	switch {
	case st == BreakerState{}:
	case prev != nil && prev.Breaker != nil && *prev.Breaker == st:
		s.Breaker = prev.Breaker
	default:
		s.Breaker = &st
	}
}

// add counts one judged consumer into the sums.
func (s *Snapshot) add(cv ConsumerView) {
	switch cv.Verdict {
	case Ghost:
		s.GhostPending += cv.Pending
		s.GhostConsumers++
	case Degraded:
		s.DegradedPending += cv.Pending
		s.DegradedConsumers++
	case Unknown:
		s.UnknownPending += cv.Pending
		s.LivePending += cv.Pending
	default:
		s.LivePending += cv.Pending
	}
	if cv.Heartbeat == HeartbeatFuture {
		s.FutureHeartbeats++
	}
	switch cv.gap() {
	case gapRefused:
		s.RefusedConsumers++
	case gapEvicted:
		s.EvictedConsumers++
	case gapNone:
	}
	if cv.ClockSkew.Abs() > FutureTolerance {
		s.SkewedClocks++
		if cv.ClockSkew.Abs() > s.ClockSkew.Abs() {
			s.ClockSkew = cv.ClockSkew
		}
	}
	s.Consumers = append(s.Consumers, cv)
}

// released is the entries no consumer holds: the group's PEL less the
// consumers' own. The two are read in one pipeline; an entry delivered or
// acknowledged between them moves the difference by that entry for that
// read only, and it never goes below zero.
func released(obs Observation) int64 {
	n := obs.PendingTotal
	for _, c := range obs.PendingByConsumer {
		n -= c
	}
	return max(n, 0)
}
