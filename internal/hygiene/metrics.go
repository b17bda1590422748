package hygiene

import "github.com/prometheus/client_golang/prometheus"

var targetLabels = []string{"redis", "stream", "group"}

type metrics struct {
	actions  *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	dryRun   *prometheus.CounterVec
	errors   *prometheus.CounterVec
	leader   *prometheus.GaugeVec
	scanTime *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_actions_total",
			Help: "Guarded hygiene actions taken, by outcome: requeued, claimed, dead-lettered, tombstone, consumer-deleted.",
		}, append(targetLabels, "outcome")),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_skipped_total",
			Help: "Entries or consumers hygiene left alone, by reason (not-pending, owner-changed, not-idle, owner-unknown, no-live-consumer, delete-has-pending, ...).",
		}, append(targetLabels, "reason")),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_dry_run_total",
			Help: "Actions a dry-run target would have taken, by outcome.",
		}, append(targetLabels, "outcome")),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_errors_total",
			Help: "Hygiene scans or actions that failed.",
		}, targetLabels),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pelwarden_hygiene_leader",
			Help: "1 while this replica holds the target's scan lease.",
		}, targetLabels),
		scanTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pelwarden_hygiene_scan_duration_seconds",
			Help:    "Time of one hygiene scan of a target.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, targetLabels),
	}
	reg.MustRegister(m.actions, m.skipped, m.dryRun, m.errors, m.leader, m.scanTime)
	return m
}

func labels(t Target) []string {
	return []string{t.Target.Conn, t.Target.Stream, t.Target.Group}
}
