package app

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
)

// targetLabels name a group; the gauges of judged counts add
// livenessLabel, since two targets on one group (ScaledObjects with other
// liveness settings) judge its consumers apart.
var targetLabels = []string{"redis", "stream", "group"}

// livenessLabel holds a target's liveness settings in their stable text
// form (liveness.Spec.String). Its values are bounded by the targets
// registered (scaler.maxTargets), and go when a target expires.
const livenessLabel = "liveness"

// metrics are pelwarden's own Prometheus metrics. The per-target gauges are
// read from the view at scrape time, so an expired target's series go with it.
type metrics struct {
	view *liveness.View
	now  func() time.Time
	// reports keeps the values behind the reported gauge for DescribeTarget.
	reports *admin.Reports
	// podSets reports the kubernetes source's pod sets; nil without it.
	podSets func() []kube.SetState

	reported      *prometheus.GaugeVec
	targetValue   *prometheus.GaugeVec
	redisErrors   *prometheus.CounterVec
	groupMissing  *prometheus.CounterVec
	refreshTime   prometheus.Histogram
	targetsActive *prometheus.Desc
	podWatchState *prometheus.Desc

	livePending, ghostPending, unknownPending *prometheus.Desc
	ghostConsumers, lag, lagEstimated, age    *prometheus.Desc
	degradedPending, degradedConsumers        *prometheus.Desc
	noHeartbeatRecords, futureHeartbeats      *prometheus.Desc
	sharedNames                               *prometheus.Desc
	heldPending                               *prometheus.Desc

	mu          sync.Mutex
	lastMissing map[string]bool
}

func newMetrics(reg prometheus.Registerer, view *liveness.View, reports *admin.Reports, podSets func() []kube.SetState, now func() time.Time) *metrics {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("pelwarden_"+name, help, targetLabels, nil)
	}
	judged := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("pelwarden_"+name, help, append(slices.Clone(targetLabels), livenessLabel), nil)
	}
	m := &metrics{
		view:    view,
		now:     now,
		reports: reports,
		podSets: podSets,
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
		targetsActive: prometheus.NewDesc("pelwarden_targets", "Registered targets.", nil, nil),
		podWatchState: prometheus.NewDesc("pelwarden_pod_watch_state",
			"1 for the state the pod cache of a namespace and selector is in, 0 for the others; only current answers.",
			[]string{"namespace", "selector", "state"}, nil),
		livePending:       judged("live_pending_entries", "Pending entries held by consumers judged Alive or Unknown (what the scaler counts), by target."),
		ghostPending:      judged("ghost_pending_entries", "Pending entries held by consumers judged Ghost (left out of the scaler's count), by target."),
		unknownPending:    judged("unknown_pending_entries", "Pending entries held by consumers whose liveness is Unknown (counted as live), by target."),
		ghostConsumers:    judged("ghost_consumers", "Consumers judged Ghost, by target."),
		degradedPending:   judged("degraded_pending_entries", "Pending entries held by consumers judged Degraded (left out of the scaler's count, given back once stale), by target."),
		degradedConsumers: judged("degraded_consumers", "Consumers judged Degraded: alive, but their heartbeat says they cannot do the work; by target."),
		noHeartbeatRecords: judged("heartbeat_records_missing", "1 while heartbeats are configured but no consumer of the group has a heartbeat record "+
			"(heartbeatKey is probably wrong): every consumer is judged Unknown and hygiene takes nothing; by target."),
		futureHeartbeats: judged("heartbeats_in_future", "Consumers whose heartbeat is dated in the future beyond the tolerance (judged Unknown), by target."),
		lag:              desc("lag_entries", "Entries not yet delivered to the group (XINFO GROUPS lag, or the estimate), from its newest read."),
		lagEstimated:     desc("lag_estimated", "1 when Redis answered a NULL lag and the lag is pelwarden's estimate, from the group's newest read."),
		age:              judged("snapshot_age_seconds", "Age of the target's latest good snapshot."),
		sharedNames:      judged("shared_consumer_names", "Consumers whose name was read from after their pod went: more than one process uses the name; by target."),
		heldPending: judged("dead_letter_held_entries", "Entries pelwarden:dead-letter holds between the steps of the two-step dead-letter path "+
			"(a dead-letter stream in another Redis Cluster slot): not counted as work; above 0 for long, step 2 or 3 keeps failing; by target."),
		lastMissing: make(map[string]bool),
	}
	reg.MustRegister(m.reported, m.targetValue, m.redisErrors, m.groupMissing, m.refreshTime, m)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.targetsActive, m.podWatchState, m.livePending, m.ghostPending, m.unknownPending,
		m.ghostConsumers, m.degradedPending, m.degradedConsumers, m.noHeartbeatRecords, m.futureHeartbeats, m.lag, m.lagEstimated, m.age, m.sharedNames, m.heldPending} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Each target speaks for its own
// series of judged counts; a group's lag, the same for every target on
// it, comes from the group's newest read.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	latest := m.view.Latest()
	ch <- prometheus.MustNewConstMetric(m.targetsActive, prometheus.GaugeValue, float64(len(latest)))
	now := m.now()
	newest := make(map[string]*liveness.Snapshot, len(latest))
	for _, l := range latest {
		s := l.Snapshot
		if s == nil {
			continue
		}
		lv := []string{l.Target.Conn, l.Target.Stream, l.Target.Group, l.Target.Spec.String()}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		gauge(m.livePending, float64(s.LivePending))
		gauge(m.ghostPending, float64(s.GhostPending))
		gauge(m.unknownPending, float64(s.UnknownPending))
		gauge(m.ghostConsumers, float64(s.GhostConsumers))
		gauge(m.degradedPending, float64(s.DegradedPending))
		gauge(m.degradedConsumers, float64(s.DegradedConsumers))
		gauge(m.noHeartbeatRecords, boolFloat(s.NoHeartbeatRecords))
		gauge(m.futureHeartbeats, float64(s.FutureHeartbeats))
		gauge(m.age, now.Sub(s.At).Seconds())
		gauge(m.sharedNames, float64(sharedNames(s)))
		gauge(m.heldPending, float64(s.HeldPending))
		if n, ok := newest[l.Target.String()]; !ok || newer(s, n) {
			newest[l.Target.String()] = s
		}
	}
	for _, s := range newest {
		lv := []string{s.Target.Conn, s.Target.Stream, s.Target.Group}
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(s.Lag), lv...)
		ch <- prometheus.MustNewConstMetric(m.lagEstimated, prometheus.GaugeValue, boolFloat(s.LagEstimated), lv...)
	}
	m.collectPodSets(ch)
}

// newer orders two reads of one group: the later one, and of two at the
// same moment the target with the smaller key, so the choice never
// depends on map order.
func newer(a, b *liveness.Snapshot) bool {
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Target.Key() < b.Target.Key()
}

func (m *metrics) collectPodSets(ch chan<- prometheus.Metric) {
	if m.podSets == nil {
		return
	}
	for _, ps := range m.podSets() {
		for _, st := range kube.States {
			v := boolFloat(ps.State == st)
			ch <- prometheus.MustNewConstMetric(m.podWatchState, prometheus.GaugeValue, v, ps.Set.Namespace, ps.Set.Selector, st.String())
		}
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
	m.reports.Forget(t.GroupRef)
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
