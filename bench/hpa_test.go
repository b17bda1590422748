package bench

import "math"

// HPA is the rule a Kubernetes HorizontalPodAutoscaler applies to one
// external metric with an AverageValue target, which is how KEDA hands
// pelwarden's metric (and its own redis-streams scaler's) to the HPA.
// pelwarden never applies it; the benchmarks use it to show what replica
// count a metric would ask for.
type HPA struct {
	// Target is the metric's target per replica (pendingEntriesCount,
	// lagCount, ...); must be > 0.
	Target float64
	// Min and Max bound the replica count; 1 <= Min <= Max.
	Min, Max int32
	// Tolerance is the HPA's dead band: no change while the metric is
	// within this fraction of Target*current. Kubernetes defaults to 0.1.
	Tolerance float64
}

// DefaultHPATolerance is kube-controller-manager's
// --horizontal-pod-autoscaler-tolerance default.
const DefaultHPATolerance = 0.1

// Desired is the replica count the HPA sets from metric with current
// replicas running: current while |metric/(Target*current) - 1| <=
// Tolerance, otherwise ceil(metric/Target); either way clamped to
// [Min, Max]. The HPA's stabilization window and scale-rate limits are
// left out: they delay a decision, they do not change it.
func (h HPA) Desired(metric float64, current int32) int32 {
	desired := current
	if current <= 0 || math.Abs(metric/(h.Target*float64(current))-1) > h.Tolerance {
		desired = int32(math.Ceil(metric / h.Target))
	}
	return min(max(desired, h.Min), h.Max)
}
