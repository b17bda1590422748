package hygiene

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

type metrics struct {
	leader   *prometheus.GaugeVec
	scanTime *prometheus.HistogramVec
	// refused counts requests that would have enrolled a group past
	// Options.MaxTargets.
	refused prometheus.Counter
}

// newMetrics registers the loop's metrics on reg; targets reports how many
// targets the loop looks after, read at scrape time.
func newMetrics(reg prometheus.Registerer, targets func() float64) *metrics {
	m := &metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pelwarden_hygiene_leader",
			Help: "1 while this replica holds the target's scan lease.",
		}, liveness.LabelNames),
		scanTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pelwarden_hygiene_scan_duration_seconds",
			Help:    "Time of one hygiene scan of a target.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, liveness.LabelNames),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_targets_refused_total",
			Help: "Requests asking for reclaim on one more group than hygiene.maxTargets allows, answered ResourceExhausted.",
		}),
	}
	count := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pelwarden_hygiene_targets",
		Help: "Groups the hygiene loop looks after, from requests and from configuration.",
	}, targets)
	reg.MustRegister(m.leader, m.scanTime, m.refused, count)
	return m
}

// forget deletes a group's series once the loop no longer looks after it.
func (m *metrics) forget(g liveness.GroupRef) {
	m.leader.DeleteLabelValues(g.Labels()...)
	m.scanTime.DeleteLabelValues(g.Labels()...)
}
