package app

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
)

// targetLabels name a group; the gauges of judged counts add
// livenessLabel, since two targets on one group (ScaledObjects with other
// liveness settings) judge its consumers apart.
var targetLabels = []string{"redis", "stream", "group"}

// livenessLabel holds a target's liveness settings in their stable text
// form (liveness.Spec.String), as a liveness.LabelValue. Its values are
// bounded by the targets registered (scaler.maxTargets), and go when a
// target expires.
const livenessLabel = "liveness"

// metrics are pelwarden's own Prometheus metrics. The per-target gauges are
// read from the view and the reports at scrape time (exposition.go), so an
// expired target's series go with it and cost nothing between scrapes.
type metrics struct {
	view *liveness.View
	now  func() time.Time
	// reports keeps the values behind the reported gauge for DescribeTarget.
	reports *admin.Reports
	// podSets reports the kubernetes source's pod sets; nil without it.
	podSets func() []kube.SetState
	// hygiene reports the hygiene loop's per-group numbers; nil until the
	// loop is built.
	hygiene func() []hygiene.GroupSeries

	redisErrors   *prometheus.CounterVec
	groupMissing  *prometheus.CounterVec
	refreshTime   prometheus.Histogram
	looks         *prometheus.CounterVec
	reads         *prometheus.CounterVec
	batches       prometheus.Histogram
	answerAge     prometheus.Histogram
	targetsActive *prometheus.Desc
	podWatchState *prometheus.Desc
	writesRefused *prometheus.Desc
	// refusing says which refusal of writes a connection's node answers
	// now, for conns, the connections' names; nil before New sets it.
	refusing func(conn string) liveness.Refusal
	conns    []string

	// exposure chooses the targets a scrape shows series of; hidden is
	// how many the last scrape left out.
	exposure exposure
	hidden   atomic.Int64

	mu          sync.Mutex
	lastMissing map[liveness.TargetKey]bool
}

func newMetrics(reg prometheus.Registerer, view *liveness.View, reports *admin.Reports, podSets func() []kube.SetState, now func() time.Time) *metrics {
	m := &metrics{
		view:    view,
		now:     now,
		reports: reports,
		podSets: podSets,
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
		looks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_deadline_looks_total",
			Help: "Looks at a verdict's deadline, by what decided them: heartbeats (a read of the keys found every worker beating again) or group (a read of the whole group).",
		}, []string{"read"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_group_reads_total",
			Help: "Reads of a group, by what asked for them: poll (a poll found no read within scaler.freshness and waited), ahead (read ahead of a target's expected poll), deadline (a look at a verdict's deadline that read the group) or asked (a StreamIsActive wake, a hygiene turn, a pod's going, the Admin API).",
		}, []string{"cause"}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pelwarden_group_read_batch_size",
			Help:    "Reads of groups sent to Redis in one round trip (one pipeline per connection).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		answerAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pelwarden_scaler_answer_age_seconds",
			Help:    "Age of the read a GetMetrics or IsActive answer came from, counted from when the read began: at most scaler.freshness.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 2, 5, 10},
		}),
		targetsActive: prometheus.NewDesc("pelwarden_targets", "Registered targets.", nil, nil),
		podWatchState: prometheus.NewDesc("pelwarden_pod_watch_state",
			"1 for the state the pod cache of a namespace and selector is in, 0 for the others; only current answers.",
			[]string{"namespace", "selector", "state"}, nil),
		writesRefused: prometheus.NewDesc("pelwarden_redis_writes_refused",
			"1 for the refusal of writes a node of the Redis connection answers now (OOM, MISCONF, READONLY, NOREPLICAS), 0 for the others: "+
				"its stale or missing heartbeats are Unknown and hygiene pauses until writes have been accepted for a max age.",
			[]string{"redis", "refusal"}, nil),
		lastMissing: make(map[liveness.TargetKey]bool),
	}
	for _, read := range []string{"heartbeats", "group"} {
		m.looks.WithLabelValues(read)
	}
	hidden := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pelwarden_metrics_targets_hidden",
		Help: "Targets of triggers whose per-target series the last scrape of /metrics left out: past scaler.maxMetricsTargets, shared between namespaces in turn."},
		func() float64 { return float64(m.hidden.Load()) })
	for _, c := range liveness.ReadCauses {
		m.reads.WithLabelValues(c.String())
	}
	reg.MustRegister(m.redisErrors, m.groupMissing, m.refreshTime, m.looks, m.reads, m.batches, m.answerAge, hidden, m)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.targetsActive
	ch <- m.podWatchState
	ch <- m.writesRefused
}

// Collect implements prometheus.Collector: the target count and the pod
// sets; the per-target families are written by the handler.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.targetsActive, prometheus.GaugeValue, float64(m.view.Len()))
	m.collectPodSets(ch)
	if m.refusing == nil {
		return
	}
	for _, c := range m.conns {
		now := m.refusing(c)
		for _, r := range liveness.Refusals {
			ch <- prometheus.MustNewConstMetric(m.writesRefused, prometheus.GaugeValue, boolFloat(now == r), liveness.LabelValue(c), r.String())
		}
	}
}

func (m *metrics) collectPodSets(ch chan<- prometheus.Metric) {
	if m.podSets == nil {
		return
	}
	for _, ps := range m.podSets() {
		for _, st := range kube.States {
			v := boolFloat(ps.State == st)
			ch <- prometheus.MustNewConstMetric(m.podWatchState, prometheus.GaugeValue, v,
				liveness.LabelValue(ps.Set.Namespace), liveness.LabelValue(ps.Set.Selector), st.String())
		}
	}
}

// looked counts one look at a deadline.
func (m *metrics) looked(byBeats bool) {
	read := "group"
	if byBeats {
		read = "heartbeats"
	}
	m.looks.WithLabelValues(read).Inc()
}

// refreshed is the view's OnRefresh hook.
func (m *metrics) refreshed(t liveness.Target, s *liveness.Snapshot, err error, took time.Duration) (groupMissingNow bool) {
	m.refreshTime.Observe(took.Seconds())
	if err != nil {
		m.redisErrors.WithLabelValues(t.Labels()...).Inc()
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Only missing groups are kept: at 10k targets a map of every one is
	// megabytes for the rare group that goes. The key is built without
	// allocating: a read of a group can settle a thousand targets.
	key := t.Comparable()
	was := m.lastMissing[key]
	if s.GroupMissing {
		m.lastMissing[key] = true
		m.groupMissing.WithLabelValues(t.Labels()...).Inc()
	} else if was {
		delete(m.lastMissing, key)
	}
	return s.GroupMissing && !was
}

// expired drops the series of a target the view let go.
func (m *metrics) expired(t liveness.Target) {
	lv := prometheus.Labels(t.LabelMap())
	m.redisErrors.Delete(lv)
	m.groupMissing.Delete(lv)
	m.reports.Forget(t)
	m.mu.Lock()
	delete(m.lastMissing, t.Comparable())
	m.mu.Unlock()
}

func (m *metrics) report(r metadata.Request, metricName string, v int64) {
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
