package hygiene

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// metrics are the loop's metrics. The per-group numbers (whether this
// replica holds the lease, how many scans ran) are kept as plain numbers
// per group and handed to the metrics page through Loop.Series, which
// renders them at scrape time: a vec child per group and family costs a
// kilobyte, and a histogram per group thirteen series, which at 10k groups
// were most of the loop's memory and of each scrape. The scan duration is
// one histogram over all groups.
type metrics struct {
	scanTime prometheus.Histogram
	// refused counts requests that would have enrolled a group past
	// Options.MaxTargets.
	refused prometheus.Counter
	// paused counts the turns left out because Redis refused writes.
	paused prometheus.Counter

	mu     sync.Mutex
	groups map[liveness.GroupRef]*GroupSeries
}

// GroupSeries is one group's numbers for the metrics page.
type GroupSeries struct {
	Group liveness.GroupRef
	// Leader says this replica holds the group's scan lease.
	Leader bool
	// Scans counts the scans of the group since the loop took it.
	Scans uint64
}

// newMetrics registers the loop's metrics on reg; targets reports how many
// targets the loop looks after, read at scrape time.
func newMetrics(reg prometheus.Registerer, targets func() float64) *metrics {
	m := &metrics{
		scanTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pelwarden_hygiene_scan_duration_seconds",
			Help:    "Time of one hygiene scan, over all targets (pelwarden_hygiene_scans_total counts them by target).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_targets_refused_total",
			Help: "Requests asking for reclaim on one more group than hygiene.maxTargets allows, answered ResourceExhausted.",
		}),
		paused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pelwarden_hygiene_paused_turns_total",
			Help: "Hygiene turns left out because the stream's Redis node refused writes (OOM, MISCONF, READONLY, NOREPLICAS): no lease, no scan.",
		}),
		groups: make(map[liveness.GroupRef]*GroupSeries),
	}
	count := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pelwarden_hygiene_targets",
		Help: "Groups the hygiene loop looks after, from requests and from configuration.",
	}, targets)
	reg.MustRegister(m.scanTime, m.refused, m.paused, count)
	return m
}

func (m *metrics) group(g liveness.GroupRef) *GroupSeries {
	s, ok := m.groups[g]
	if !ok {
		s = &GroupSeries{Group: g}
		m.groups[g] = s
	}
	return s
}

// setLeader records whether this replica holds the group's lease.
func (m *metrics) setLeader(g liveness.GroupRef, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.group(g).Leader = held
}

// observeScan counts one scan of the group that took d.
func (m *metrics) observeScan(g liveness.GroupRef, d time.Duration) {
	m.scanTime.Observe(d.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.group(g).Scans++
}

// forget deletes a group's series once the loop no longer looks after it.
func (m *metrics) forget(g liveness.GroupRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.groups, g)
}

// Series returns the per-group numbers of every group the loop has
// scanned or leased, in no order.
func (l *Loop) Series() []GroupSeries {
	m := l.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]GroupSeries, 0, len(m.groups))
	for _, s := range m.groups {
		out = append(out, *s)
	}
	return out
}
