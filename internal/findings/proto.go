package findings

import (
	"github.com/pelwarden/pelwarden/internal/liveness"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Proto returns the kind as the API's FindingKind; the numbers are the same.
func (k Kind) Proto() pelwardenv1.FindingKind {
	switch k {
	case SharedName:
		return pelwardenv1.FindingKind_FINDING_KIND_SHARED_NAME
	case NoPod:
		return pelwardenv1.FindingKind_FINDING_KIND_NO_POD
	case Bouncing:
		return pelwardenv1.FindingKind_FINDING_KIND_BOUNCING
	case NoOwner:
		return pelwardenv1.FindingKind_FINDING_KIND_NO_OWNER
	case Tombstone:
		return pelwardenv1.FindingKind_FINDING_KIND_TOMBSTONE
	case NullLag:
		return pelwardenv1.FindingKind_FINDING_KIND_NULL_LAG
	case PodsUnobserved:
		return pelwardenv1.FindingKind_FINDING_KIND_PODS_UNOBSERVED
	case NoHeartbeatRecords:
		return pelwardenv1.FindingKind_FINDING_KIND_NO_HEARTBEAT_RECORDS
	case HeartbeatInFuture:
		return pelwardenv1.FindingKind_FINDING_KIND_HEARTBEAT_IN_FUTURE
	case FieldCollision:
		return pelwardenv1.FindingKind_FINDING_KIND_FIELD_COLLISION
	case HeartbeatCandidatesCut:
		return pelwardenv1.FindingKind_FINDING_KIND_HEARTBEAT_CANDIDATES_CUT
	case IdleUndecided:
		return pelwardenv1.FindingKind_FINDING_KIND_IDLE_UNDECIDED
	case Disruption:
		return pelwardenv1.FindingKind_FINDING_KIND_DISRUPTION
	case WritesRefused:
		return pelwardenv1.FindingKind_FINDING_KIND_WRITES_REFUSED
	case ClockSkew:
		return pelwardenv1.FindingKind_FINDING_KIND_CLOCK_SKEW
	case HeartbeatsEvicted:
		return pelwardenv1.FindingKind_FINDING_KIND_HEARTBEATS_EVICTED
	case ClaimingReaders:
		return pelwardenv1.FindingKind_FINDING_KIND_CLAIMING_READERS
	case Released:
		return pelwardenv1.FindingKind_FINDING_KIND_RELEASED
	default:
		return pelwardenv1.FindingKind_FINDING_KIND_UNSPECIFIED
	}
}

// ToProto returns findings of target t as the API's messages.
func ToProto(t liveness.Target, fs []Finding) []*pelwardenv1.Finding {
	out := make([]*pelwardenv1.Finding, len(fs))
	for i, f := range fs {
		out[i] = &pelwardenv1.Finding{
			Kind:     f.Kind.Proto(),
			Target:   &pelwardenv1.TargetRef{Redis: t.Conn, Stream: t.Stream, Group: t.Group},
			Consumer: f.Consumer,
			Ids:      f.IDs,
			Detail:   f.Detail,
			Entries:  f.Entries,
		}
	}
	return out
}
