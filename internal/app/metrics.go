package app

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
)

var targetLabels = []string{"redis", "stream", "group"}

// metrics are pelwarden's own Prometheus metrics. The per-target gauges are
// read from the view at scrape time, so an expired target's series go with it.
type metrics struct {
	view *liveness.View
	now  func() time.Time
	// reports keeps the values behind the reported gauge for DescribeTarget.
	reports *admin.Reports

	reported      *prometheus.GaugeVec
	targetValue   *prometheus.GaugeVec
	redisErrors   *prometheus.CounterVec
	groupMissing  *prometheus.CounterVec
	refreshTime   prometheus.Histogram
	targetsActive *prometheus.Desc

	livePending, ghostPending, unknownPending *prometheus.Desc
	ghostConsumers, lag, lagEstimated, age    *prometheus.Desc
	sharedNames                               *prometheus.Desc

	mu          sync.Mutex
	lastMissing map[string]bool
}

func newMetrics(reg prometheus.Registerer, view *liveness.View, reports *admin.Reports, now func() time.Time) *metrics {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("pelwarden_"+name, help, targetLabels, nil)
	}
	m := &metrics{
		view:    view,
		now:     now,
		reports: reports,
		reported: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pelwarden_scaler_reported_value",
			Help: "The value GetMetrics last reported to KEDA, by target and metric.",
		}, append(targetLabels, "metric")),
		targetValue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pelwarden_scaler_target_value",
			Help: "The per-replica target of the metric GetMetrics last reported (pendingEntriesCount, lagCount or backlogCount), so dashboards can show the replicas the HPA asks for.",
		}, append(targetLabels, "metric")),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_redis_errors_total",
			Help: "Reads of a target that failed.",
		}, targetLabels),
		groupMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_group_missing_total",
			Help: "Reads that found the stream present but the consumer group missing (reported as 0).",
		}, targetLabels),
		refreshTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pelwarden_refresh_duration_seconds",
			Help:    "Time to read and judge one target.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}),
		targetsActive:  prometheus.NewDesc("pelwarden_targets", "Registered targets.", nil, nil),
		livePending:    desc("live_pending_entries", "Pending entries held by consumers judged Alive or Unknown (what the scaler counts)."),
		ghostPending:   desc("ghost_pending_entries", "Pending entries held by consumers judged Ghost (left out of the scaler's count)."),
		unknownPending: desc("unknown_pending_entries", "Pending entries held by consumers whose liveness is Unknown (counted as live)."),
		ghostConsumers: desc("ghost_consumers", "Consumers judged Ghost."),
		lag:            desc("lag_entries", "Entries not yet delivered to the group (XINFO GROUPS lag, or the estimate)."),
		lagEstimated:   desc("lag_estimated", "1 when Redis answered a NULL lag and the lag is pelwarden's estimate."),
		age:            desc("snapshot_age_seconds", "Age of the target's latest good snapshot."),
		sharedNames:    desc("shared_consumer_names", "Consumers whose name was read from after their pod went: more than one process uses the name."),
		lastMissing:    make(map[string]bool),
	}
	reg.MustRegister(m.reported, m.targetValue, m.redisErrors, m.groupMissing, m.refreshTime, m)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.targetsActive, m.livePending, m.ghostPending, m.unknownPending, m.ghostConsumers, m.lag, m.lagEstimated, m.age, m.sharedNames} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	latest := m.view.Latest()
	ch <- prometheus.MustNewConstMetric(m.targetsActive, prometheus.GaugeValue, float64(len(latest)))
	now := m.now()
	seen := make(map[string]bool, len(latest))
	for _, l := range latest {
		s := l.Snapshot
		lv := []string{l.Target.Conn, l.Target.Stream, l.Target.Group}
		key := l.Target.String()
		if s == nil || seen[key] {
			// Targets that differ only in liveness settings share labels;
			// the first one speaks for the series.
			continue
		}
		seen[key] = true
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		gauge(m.livePending, float64(s.LivePending))
		gauge(m.ghostPending, float64(s.GhostPending))
		gauge(m.unknownPending, float64(s.UnknownPending))
		gauge(m.ghostConsumers, float64(s.GhostConsumers))
		gauge(m.lag, float64(s.Lag))
		gauge(m.lagEstimated, boolFloat(s.LagEstimated))
		gauge(m.age, now.Sub(s.At).Seconds())
		gauge(m.sharedNames, float64(sharedNames(s)))
	}
}

// refreshed is the view's OnRefresh hook.
func (m *metrics) refreshed(t liveness.Target, s *liveness.Snapshot, err error, took time.Duration) (groupMissingNow bool) {
	lv := []string{t.Conn, t.Stream, t.Group}
	m.refreshTime.Observe(took.Seconds())
	if err != nil {
		m.redisErrors.WithLabelValues(lv...).Inc()
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.lastMissing[t.Key()]
	m.lastMissing[t.Key()] = s.GroupMissing
	if s.GroupMissing {
		m.groupMissing.WithLabelValues(lv...).Inc()
	}
	return s.GroupMissing && !was
}

// expired drops the series of a target the view let go.
func (m *metrics) expired(t liveness.Target) {
	lv := prometheus.Labels{"redis": t.Conn, "stream": t.Stream, "group": t.Group}
	m.reported.DeletePartialMatch(lv)
	m.targetValue.DeletePartialMatch(lv)
	m.redisErrors.Delete(lv)
	m.groupMissing.Delete(lv)
	m.reports.Forget(events.Group{Conn: t.Conn, Stream: t.Stream, Group: t.Group})
	m.mu.Lock()
	delete(m.lastMissing, t.Key())
	m.mu.Unlock()
}

func (m *metrics) report(r metadata.Request, metricName string, v int64) {
	lv := []string{r.Target.Conn, r.Target.Stream, r.Target.Group, r.Metric.Key()}
	m.reported.WithLabelValues(lv...).Set(float64(v))
	m.targetValue.WithLabelValues(lv...).Set(r.TargetValue)
	m.reports.Record(r, metricName, v, m.now())
}

func sharedNames(s *liveness.Snapshot) int {
	n := 0
	for _, c := range s.Consumers {
		if c.SharedName {
			n++
		}
	}
	return n
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
