package hygiene

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

type metrics struct {
	leader   *prometheus.GaugeVec
	scanTime *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
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
	}
	reg.MustRegister(m.leader, m.scanTime)
	return m
}

// forget deletes a group's series once the loop no longer looks after it.
func (m *metrics) forget(g liveness.GroupRef) {
	m.leader.DeleteLabelValues(g.Labels()...)
	m.scanTime.DeleteLabelValues(g.Labels()...)
}
