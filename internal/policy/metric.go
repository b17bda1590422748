// Package policy holds pelwarden's decisions as pure functions over plain
// values: what the scaler reports, and (for hygiene) what to do with entries.
package policy

import "github.com/pelwarden/pelwarden/internal/liveness"

// Metric is what a scaled object scales on.
type Metric int

// The metrics a trigger can ask for, named by their metadata keys.
const (
	// Pending is the pending entries held by consumers that are not
	// ghosts, and those released to the group (XNACK).
	Pending Metric = iota
	// Lag is the entries not yet delivered to the group.
	Lag
	// Backlog is Lag plus Pending: all the work that live workers face.
	Backlog
)

// Key is the metadata key that selects the metric and sets its target.
func (m Metric) Key() string {
	switch m {
	case Lag:
		return "lagCount"
	case Backlog:
		return "backlogCount"
	default:
		return "pendingEntriesCount"
	}
}

// ActivationKey is the metadata key of the metric's activation threshold.
func (m Metric) ActivationKey() string {
	switch m {
	case Lag:
		return "activationLagCount"
	case Backlog:
		return "activationBacklogCount"
	default:
		return "activationPendingEntriesCount"
	}
}

// Value is the metric as KEDA should see it. Ghost-held entries are left
// out; entries of consumers whose liveness is Unknown count as live, so a
// source that cannot answer never shrinks the count; entries released to
// the group (XNACK) are work waiting for a reader, as KEDA counts them. A
// missing stream or group is no work.
func Value(m Metric, s *liveness.Snapshot) int64 {
	if s.StreamMissing {
		return 0
	}
	switch m {
	case Lag:
		return s.Lag
	case Backlog:
		return s.Lag + s.LivePending + s.ReleasedPending
	default:
		return s.LivePending + s.ReleasedPending
	}
}

// Active reports whether the value passes the activation threshold, as
// KEDA's own scalers do: strictly greater.
func Active(value int64, activation float64) bool {
	return float64(value) > activation
}
