// Package findings reports what looks wrong with a consumer group: shared
// consumer names, consumers with no pod or no owner, entries bouncing
// between deliveries, tombstones, a NULL lag, a group without any heartbeat
// record, heartbeats dated in the future, entries holding a field a reclaim
// would write, owner candidates cut, a disruption breaker that holds, a
// Redis that refuses writes, skewed clocks and evicted heartbeat keys. It
// is the detector behind
// pelwarden.v1.Admin/Findings.
//
// It reads and never writes: no finding is acted on here, and Detect sends
// Redis only read commands (XPENDING, XRANGE, a script that only runs
// XRANGE and, when asked, MONITOR).
package findings

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Kind is what a finding is about. The values are those of the proto's
// FindingKind.
type Kind int

// The kinds of finding, in the order Detect reports them.
const (
	// SharedName is one consumer name used by more than one process (or
	// connection): two readers share one PEL.
	SharedName Kind = 1
	// NoPod is a consumer whose owner matches no pod of the selector.
	NoPod Kind = 2
	// Bouncing is entries delivered at least MinDeliveries times.
	Bouncing Kind = 3
	// NoOwner is a consumer whose name ownerMatch resolves to no owner.
	NoOwner Kind = 4
	// Tombstone is pending entries whose stream entry was deleted.
	Tombstone Kind = 5
	// NullLag is a group whose lag Redis reports as NULL.
	NullLag Kind = 6
	// PodsUnobserved is a target whose kubernetes source cannot answer:
	// RBAC refuses it, or its pod cache is not current.
	PodsUnobserved Kind = 7
	// NoHeartbeatRecords is a group with heartbeats configured in which no
	// consumer has a heartbeat record: heartbeatKey is probably wrong.
	NoHeartbeatRecords Kind = 8
	// HeartbeatInFuture is a consumer whose heartbeat is dated in the
	// future beyond liveness.FutureTolerance: a broken clock or writer.
	HeartbeatInFuture Kind = 9
	// FieldCollision is pending entries that hold, as a field of the job, a
	// field a reclaim would write: reclaims leave them pending, untouched.
	FieldCollision Kind = 10
	// HeartbeatCandidatesCut is a consumer whose ownerMatch gave more owner
	// candidates than liveness.MaxCandidates: only the longest were read.
	HeartbeatCandidatesCut Kind = 11
	// IdleUndecided is a consumer holding entries that only its idle time
	// could judge, on a server whose idle counts delivering reads only
	// (Redis before 7.2): it is Unknown.
	IdleUndecided Kind = 12
	// Disruption is a group whose disruption breaker holds consumers
	// Unknown: most of those Alive turned Ghost together on evidence no
	// pod confirmed.
	Disruption Kind = 13
	// WritesRefused is a target a Redis node of whose refuses writes:
	// its stale or missing heartbeats are Unknown, and hygiene pauses.
	WritesRefused Kind = 14
	// ClockSkew is a worker whose clock is off Redis's beyond
	// liveness.FutureTolerance: never a death, since heartbeats are
	// judged on Redis's clock.
	ClockSkew Kind = 15
	// HeartbeatsEvicted is a group whose missing heartbeat keys may have
	// been evicted: those consumers are Unknown.
	HeartbeatsEvicted Kind = 16
	// ClaimingReaders is a group whose workers claim entries as they read
	// (XREADGROUP ... CLAIM, XAUTOCLAIM): entries move between consumers
	// without pelwarden.
	ClaimingReaders Kind = 17
	// Released is entries released to the group with XNACK: work no
	// consumer holds, waiting for a reader that claims.
	Released Kind = 18
)

func (k Kind) String() string {
	switch k {
	case SharedName:
		return "shared-name"
	case NoPod:
		return "no-pod"
	case Bouncing:
		return "bouncing"
	case NoOwner:
		return "no-owner"
	case Tombstone:
		return "tombstone"
	case NullLag:
		return "null-lag"
	case PodsUnobserved:
		return "pods-unobserved"
	case NoHeartbeatRecords:
		return "no-heartbeat-records"
	case HeartbeatInFuture:
		return "heartbeat-in-future"
	case FieldCollision:
		return "field-collision"
	case HeartbeatCandidatesCut:
		return "heartbeat-candidates-cut"
	case IdleUndecided:
		return "idle-undecided"
	case Disruption:
		return "disruption"
	case WritesRefused:
		return "writes-refused"
	case ClockSkew:
		return "clock-skew"
	case HeartbeatsEvicted:
		return "heartbeats-evicted"
	case ClaimingReaders:
		return "claiming-readers"
	case Released:
		return "released"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// MaxIDs bounds the entry ids listed in one finding; the detail gives the
// full count.
const MaxIDs = 100

// DefaultMinDeliveries is the bouncing threshold of a target without
// maxDeliveries: an entry delivered three times has failed twice.
const DefaultMinDeliveries = 3

// DefaultMaxScan bounds the pending entries one Detect reads: enough for the
// oldest entries of any healthy group, few enough to read in well under a
// second.
const DefaultMaxScan = 10000

// Finding is one thing that looks wrong.
type Finding struct {
	Kind Kind
	// Consumer is the consumer concerned, empty for a group finding.
	Consumer string
	// IDs are the entries concerned (bouncing, tombstones) in id order, at
	// most MaxIDs.
	IDs []string
	// Detail says what was seen, in words an operator can act on.
	Detail string
	// Entries is how many entries the finding concerns, where it counts
	// them (IDs holds at most MaxIDs); 0 where it does not.
	Entries int64
}

// Input is what Detect looks at.
type Input struct {
	// Snapshot is a fresh read of the target: verdicts, owners, pods, lag.
	Snapshot *liveness.Snapshot
	// Client is the connection of the target's Redis.
	Client redis.UniversalClient
	// MinDeliveries is the delivery count from which an entry is bouncing;
	// the caller resolves the default (maxDeliveries, or
	// DefaultMinDeliveries).
	MinDeliveries int64
	// Sample is how long to watch MONITOR for consumer names used from more
	// than one connection; 0 skips it. MONITOR slows a busy server, so
	// callers leave it off unless an operator asks.
	Sample time.Duration
	// MaxScan bounds the pending entries read for bouncing entries,
	// tombstones and field collisions, oldest first.
	MaxScan int64
	// CarryField and DeadLetter are the target's deliveryCountField and
	// whether it dead-letters: what a reclaim would write into an entry.
	CarryField string
	DeadLetter bool
	// Readers is what the hygiene loop saw of the group's readers; nil
	// where it does not look after the group.
	Readers *Readers
}

func (in Input) validate() error {
	switch {
	case in.Snapshot == nil:
		return errors.New("findings: Snapshot is nil")
	case in.Client == nil:
		return errors.New("findings: Client is nil")
	case in.MinDeliveries < 1:
		return fmt.Errorf("findings: MinDeliveries must be at least 1, got %d", in.MinDeliveries)
	case in.MaxScan < 1:
		return fmt.Errorf("findings: MaxScan must be at least 1, got %d", in.MaxScan)
	case in.Sample < 0:
		return fmt.Errorf("findings: Sample must be 0 (skip) or positive, got %s", in.Sample)
	}
	return nil
}

// Detect reports the findings of one target, sorted by kind, then consumer.
// The snapshot gives shared names seen by the kubernetes source, consumers
// with no pod or no owner, and a NULL lag; a bounded scan of the PEL gives
// bouncing entries and tombstones; a MONITOR sample, when asked, gives names
// read from more than one connection. A Redis error fails the whole call:
// an unread group is never reported as a healthy one.
func Detect(ctx context.Context, in Input) ([]Finding, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	s := in.Snapshot
	if s.StreamMissing || s.GroupMissing {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type sampled struct {
		use nameUse
		err error
	}
	var monitor chan sampled
	if in.Sample > 0 {
		monitor = make(chan sampled, 1)
		go func() {
			use, err := sampleNames(ctx, in.Client, s.Target.Stream, s.Target.Group, in.Sample)
			monitor <- sampled{use, err}
		}()
	}

	out := append(fromSnapshot(s), fromReaders(s, in.Readers)...)
	pel, err := scanPEL(ctx, in.Client, s.Target.Stream, s.Target.Group, in.MaxScan, in.MinDeliveries, writes{in.CarryField, in.DeadLetter})
	if err != nil {
		cancel()
	}
	if monitor != nil {
		m := <-monitor
		if err == nil && m.err != nil {
			err = m.err
		}
		out = mergeShared(out, m.use, in.Sample)
	}
	if err != nil {
		return nil, fmt.Errorf("findings of %s: %w", s.Target, err)
	}
	out = append(out, pel.findings(in.MinDeliveries)...)
	slices.SortStableFunc(out, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Consumer, b.Consumer))
	})
	return out, nil
}
