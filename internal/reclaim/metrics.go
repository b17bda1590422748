package reclaim

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

type metrics struct {
	actions *prometheus.CounterVec
	skipped *prometheus.CounterVec
	dryRun  *prometheus.CounterVec
	errors  *prometheus.CounterVec
	// replicasBehind counts guarded writes fewer replicas acknowledged
	// than the connection's waitReplicas asks.
	replicasBehind *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	labels := func(extra ...string) []string { return append(append([]string(nil), liveness.LabelNames...), extra...) }
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_actions_total",
			Help: "Guarded actions taken on a group by the hygiene loop or an operator, by outcome: requeued, claimed, released, dead-lettered, tombstoned, consumer-deleted.",
		}, labels("outcome")),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_skipped_total",
			Help: "Entries or consumers left alone, by reason (not-pending, owner-changed, not-idle, owner-unknown, no-live-consumer, release-unsupported, failed, field-collision, delete-has-pending, ...).",
		}, labels("reason")),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_dry_run_total",
			Help: "Actions a dry-run hygiene target would have taken, by outcome.",
		}, labels("outcome")),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_errors_total",
			Help: "Hygiene scans, leases or entry writes that failed.",
		}, labels()),
		replicasBehind: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_replicas_behind_total",
			Help: "Guarded writes that fewer replicas acknowledged within waitTimeout than the connection's waitReplicas asks; each stops its scan.",
		}, labels()),
	}
	reg.MustRegister(m.actions, m.skipped, m.dryRun, m.errors, m.replicasBehind)
	return m
}

// CountError counts a failure around the engine, such as a scan's read or
// a lease, under the group's hygiene errors.
func (e *Engine) CountError(g liveness.GroupRef) {
	e.metrics.errors.WithLabelValues(g.Labels()...).Inc()
}

// Forget deletes every series of a group, when the group is no longer
// looked after.
func (e *Engine) Forget(g liveness.GroupRef) {
	match := prometheus.Labels(g.LabelMap())
	for _, v := range []*prometheus.CounterVec{e.metrics.actions, e.metrics.skipped, e.metrics.dryRun, e.metrics.errors, e.metrics.replicasBehind} {
		v.DeletePartialMatch(match)
	}
	e.moves.forget(g)
}
