package app

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
)

// The per-target families are not kept in the registry: at 10k targets
// they are 150k series, and a registry's Gather builds every one of them
// as a protobuf message before the first byte is written, twice the live
// heap at each scrape. metricsHandler writes the registry's families, then
// renders the per-target ones from the view and the reports one family at
// a time, reusing one set of messages: a scrape holds one family's worth.

// targetFamily is one per-target gauge family read from a snapshot.
type targetFamily struct {
	name, help string
	value      func(s *liveness.Snapshot, now float64) float64
}

// judgedFamilies are labeled by the target's group and liveness settings:
// two targets on one group judge its consumers apart.
var judgedFamilies = []targetFamily{
	{"pelwarden_live_pending_entries", "Pending entries held by consumers judged Alive or Unknown (what the scaler counts), by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.LivePending) }},
	{"pelwarden_ghost_pending_entries", "Pending entries held by consumers judged Ghost (left out of the scaler's count), by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.GhostPending) }},
	{"pelwarden_unknown_pending_entries", "Pending entries held by consumers whose liveness is Unknown (counted as live), by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.UnknownPending) }},
	{"pelwarden_ghost_consumers", "Consumers judged Ghost, by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.GhostConsumers) }},
	{"pelwarden_degraded_pending_entries", "Pending entries held by consumers judged Degraded (left out of the scaler's count, given back once stale), by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.DegradedPending) }},
	{"pelwarden_degraded_consumers", "Consumers judged Degraded: alive, but their heartbeat says they cannot do the work; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.DegradedConsumers) }},
	{"pelwarden_heartbeat_records_missing", "1 while heartbeats are configured but no consumer of the group has a heartbeat record " +
		"(heartbeatKey is probably wrong): every consumer is judged Unknown and hygiene takes nothing; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return boolFloat(s.NoHeartbeatRecords) }},
	{"pelwarden_heartbeats_in_future", "Consumers whose heartbeat is dated in the future beyond the tolerance (judged Unknown), by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.FutureHeartbeats) }},
	{"pelwarden_heartbeat_clock_skew_seconds", "The clock skew of the worker whose clock is furthest off Redis's, beyond 5s, signed " +
		"(negative: behind), as measured by the reads that saw its heartbeat change; 0 when none is: judged on Redis's clock, a skew is never a death; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return s.ClockSkew.Seconds() }},
	{"pelwarden_breaker_held_consumers", "Consumers the disruption breaker holds Unknown (counted as live, nothing taken): most of the group " +
		"turned Ghost together on evidence no pod confirmed; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.BreakerState().Held) }},
	{"pelwarden_snapshot_age_seconds", "Age of the target's latest good snapshot.",
		func(s *liveness.Snapshot, now float64) float64 { return now - float64(s.At.UnixNano())/1e9 }},
	{"pelwarden_shared_consumer_names", "Consumers whose name was read from after their pod went: more than one process uses the name; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(sharedNames(s)) }},
	{"pelwarden_dead_letter_held_entries", "Entries pelwarden:dead-letter holds between the steps of the two-step dead-letter path " +
		"(a dead-letter stream in another Redis Cluster slot): not counted as work; above 0 for long, step 2 or 3 keeps failing; by target.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.HeldPending) }},
}

// failingFamily is labeled as the judged families, with a series only for
// a target whose latest read failed.
var failingFamily = targetFamily{"pelwarden_read_failing",
	"1 while the target's latest read of Redis failed: its GetMetrics and IsActive get Unavailable, never a number, until a read succeeds; " +
		"no series otherwise.", nil}

// groupFamilies are labeled by the group alone and read from its newest
// snapshot: a group's lag is the same for every target on it.
var groupFamilies = []targetFamily{
	{"pelwarden_lag_entries", "Entries not yet delivered to the group (XINFO GROUPS lag, or the estimate), from its newest read.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.Lag) }},
	{"pelwarden_lag_estimated", "1 when Redis answered a NULL lag and the lag is pelwarden's estimate, from the group's newest read.",
		func(s *liveness.Snapshot, _ float64) float64 { return boolFloat(s.LagEstimated) }},
	{"pelwarden_released_pending_entries", "Entries released to the group with XNACK (Redis 8.8): pending with no owner, counted as work " +
		"by the scaler, waiting for a reader that claims; from the group's newest read.",
		func(s *liveness.Snapshot, _ float64) float64 { return float64(s.ReleasedPending) }},
}

// reportFamilies are labeled by the target (group and liveness settings),
// the metric reported to KEDA and its per-replica target: a trigger with
// other settings on the same group has series of its own.
var reportFamilies = []struct {
	name, help string
	value      func(admin.Figure) float64
}{
	{"pelwarden_scaler_reported_value", "The value GetMetrics last reported to KEDA, by target, metric and per-replica target.",
		func(r admin.Figure) float64 { return float64(r.Value) }},
	{"pelwarden_scaler_target_value", "The per-replica target of the metric GetMetrics last reported (pendingEntriesCount, lagCount or backlogCount), " +
		"so dashboards can show the replicas the HPA asks for.",
		func(r admin.Figure) float64 { return r.TargetValue }},
}

// hygieneFamilies are labeled by the group a hygiene target scans.
var hygieneFamilies = []struct {
	name, help string
	kind       dto.MetricType
	value      func(hygiene.GroupSeries) float64
}{
	{"pelwarden_hygiene_leader", "1 while this replica holds the target's scan lease.", dto.MetricType_GAUGE,
		func(s hygiene.GroupSeries) float64 { return boolFloat(s.Leader) }},
	{"pelwarden_hygiene_scans_total", "Hygiene scans of the target.", dto.MetricType_COUNTER,
		func(s hygiene.GroupSeries) float64 { return float64(s.Scans) }},
}

// handler serves /metrics: the registry's families, then the
// per-target ones. It negotiates the format and compression as promhttp
// does.
func (m *metrics) handler(reg prometheus.Gatherer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The targets are chosen first, so that the count of those left
		// out, a registry family, is this scrape's.
		shown := m.exposure.choose(m.snapshots(), m.view.Failing())
		m.hidden.Store(int64(shown.hidden))
		mfs, err := reg.Gather()
		if err != nil {
			http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r.Header) {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			defer func() { _ = gz.Close() }()
			out = gz
		}
		enc := expfmt.NewEncoder(out, format)
		for _, mf := range mfs {
			if enc.Encode(mf) != nil {
				return // the scraper went away; nothing to tell it
			}
		}
		var fams families = dtoFamilies{enc}
		if format.FormatType() == expfmt.TypeTextPlain {
			bw := bufio.NewWriterSize(out, 32<<10)
			defer func() { _ = bw.Flush() }()
			fams = &textFamilies{w: bw}
		}
		_ = m.encodeTargets(fams, shown)
	})
}

// families writes the per-target families in the scrape's format. A set
// of rows shares its label names and each row's label values; each family
// of the set gives every row a value.
type families interface {
	rows(names []string, n int, values func(i int) []string) familyRows
}

type familyRows interface {
	family(name, help string, kind dto.MetricType, value func(i int) float64) error
}

// dtoFamilies encodes through expfmt, for every format: one family's
// messages at a time, over label pairs made once for the set.
type dtoFamilies struct{ enc expfmt.Encoder }

func (d dtoFamilies) rows(names []string, n int, values func(i int) []string) familyRows {
	return dtoRows{enc: d.enc, rows: newSeriesRows(labelsOf(n, values, names))}
}

type dtoRows struct {
	enc  expfmt.Encoder
	rows *seriesRows
}

func (d dtoRows) family(name, help string, kind dto.MetricType, value func(i int) float64) error {
	for i := range d.rows.values {
		d.rows.values[i] = value(i)
	}
	return d.rows.encode(d.enc, name, help, kind)
}

func acceptsGzip(h http.Header) bool {
	for part := range strings.SplitSeq(h.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}

// seriesRows is one family's series, reused from family to family: only
// the values change. Each row's gauge (and counter) points at its value
// and is made once, in one allocation for all rows: made per family and
// row, they were most of what a scrape of 10k targets allocated.
type seriesRows struct {
	metrics  []*dto.Metric
	values   []float64
	gauges   []dto.Gauge
	counters []dto.Counter // made for the first counter family
}

func newSeriesRows(labels [][]*dto.LabelPair) *seriesRows {
	n := len(labels)
	r := &seriesRows{metrics: make([]*dto.Metric, n), values: make([]float64, n), gauges: make([]dto.Gauge, n)}
	ms := make([]dto.Metric, n)
	for i, l := range labels {
		ms[i].Label = l
		r.gauges[i].Value = &r.values[i]
		r.metrics[i] = &ms[i]
	}
	return r
}

// encode writes the rows' current values as one family of kind, a gauge
// or a counter.
func (r *seriesRows) encode(enc expfmt.Encoder, name, help string, kind dto.MetricType) error {
	if len(r.metrics) == 0 {
		return nil
	}
	if kind == dto.MetricType_COUNTER && r.counters == nil {
		r.counters = make([]dto.Counter, len(r.metrics))
		for i := range r.counters {
			r.counters[i].Value = &r.values[i]
		}
	}
	for i, m := range r.metrics {
		m.Gauge, m.Counter = nil, nil
		if kind == dto.MetricType_COUNTER {
			m.Counter = &r.counters[i]
		} else {
			m.Gauge = &r.gauges[i]
		}
	}
	return enc.Encode(&dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: kind.Enum(), Metric: r.metrics})
}

// encodeTargets writes the per-target families of the targets shown.
func (m *metrics) encodeTargets(out families, shown shown) error {
	snaps := shown.snaps
	now := float64(m.now().UnixNano()) / 1e9
	rows := out.rows(judgedLabels, len(snaps), func(i int) []string { return snaps[i].s.Target.Labels(snaps[i].spec) })
	for _, f := range judgedFamilies {
		if err := rows.family(f.name, f.help, dto.MetricType_GAUGE, func(i int) float64 { return f.value(snaps[i].s, now) }); err != nil {
			return err
		}
	}
	failing := shown.failing
	rows = out.rows(judgedLabels, len(failing), func(i int) []string {
		return failing[i].Labels(liveness.LabelValue(failing[i].Spec.String()))
	})
	if err := rows.family(failingFamily.name, failingFamily.help, dto.MetricType_GAUGE, func(int) float64 { return 1 }); err != nil {
		return err
	}
	groups := newestPerGroup(snaps)
	rows = out.rows(liveness.LabelNames, len(groups), func(i int) []string { return groups[i].Target.Labels() })
	for _, f := range groupFamilies {
		if err := rows.family(f.name, f.help, dto.MetricType_GAUGE, func(i int) float64 { return f.value(groups[i], now) }); err != nil {
			return err
		}
	}
	if err := m.encodeHygiene(out, shown); err != nil {
		return err
	}
	reports := latestFigures(shown.figures(m.reports.Figures()))
	rows = out.rows(reportLabels, len(reports), func(i int) []string { return reportLabelValues(reports[i]) })
	for _, f := range reportFamilies {
		if err := rows.family(f.name, f.help, dto.MetricType_GAUGE, func(i int) float64 { return f.value(reports[i]) }); err != nil {
			return err
		}
	}
	return nil
}

// encodeHygiene writes the hygiene loop's per-group families.
func (m *metrics) encodeHygiene(out families, shown shown) error {
	if m.hygiene == nil {
		return nil
	}
	series := shown.hygieneSeries(m.hygiene())
	slices.SortFunc(series, func(a, b hygiene.GroupSeries) int { return compareGroups(a.Group, b.Group) })
	rows := out.rows(liveness.LabelNames, len(series), func(i int) []string { return series[i].Group.Labels() })
	for _, f := range hygieneFamilies {
		if err := rows.family(f.name, f.help, f.kind, func(i int) float64 { return f.value(series[i]) }); err != nil {
			return err
		}
	}
	return nil
}

var (
	judgedLabels = append(slices.Clone(liveness.LabelNames), livenessLabel)
	reportLabels = append(slices.Clone(liveness.LabelNames), livenessLabel, "metric", "target")
)

func reportLabelValues(f admin.Figure) []string {
	return f.Group.Labels(liveness.LabelValue(f.Liveness), f.Metric.Key(), strconv.FormatFloat(f.TargetValue, 'g', -1, 64))
}

// judged is a target's latest good snapshot with its liveness label.
type judged struct {
	s    *liveness.Snapshot
	spec string
}

// snapshots are the view's latest good snapshots, in group then liveness
// order, so a scrape's order is stable and a group's targets are next to
// each other.
func (m *metrics) snapshots() []judged {
	snaps := m.view.Snapshots()
	out := make([]judged, len(snaps))
	// Targets mostly share a few profiles: each spec's label is made once
	// a scrape, not once a target.
	labels := map[liveness.Spec]string{}
	for i, s := range snaps {
		spec, ok := labels[s.Target.Spec]
		if !ok {
			spec = liveness.LabelValue(s.Target.Spec.String())
			labels[s.Target.Spec] = spec
		}
		out[i] = judged{s: s, spec: spec}
	}
	slices.SortFunc(out, func(a, b judged) int {
		return cmp.Or(compareGroups(a.s.Target.GroupRef, b.s.Target.GroupRef), cmp.Compare(a.spec, b.spec))
	})
	return out
}

func compareGroups(a, b liveness.GroupRef) int {
	return cmp.Or(cmp.Compare(a.Conn, b.Conn), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Group, b.Group))
}

// newestPerGroup keeps, of each group's snapshots, the newest; of two
// read at the same moment, the first in liveness order, so the choice
// never depends on map order.
func newestPerGroup(snaps []judged) []*liveness.Snapshot {
	var out []*liveness.Snapshot
	for _, j := range snaps {
		if n := len(out); n > 0 && out[n-1].Target.GroupRef == j.s.Target.GroupRef {
			if j.s.At.After(out[n-1].At) {
				out[n-1] = j.s
			}
			continue
		}
		out = append(out, j.s)
	}
	return out
}

// latestFigures keeps one report per series: reports of one target,
// metric and per-replica target that differ only in their activation are
// one series, the latest (their values come from one snapshot). It sorts
// and compacts all in place.
func latestFigures(all []admin.Figure) []admin.Figure {
	same := func(a, b *admin.Figure) int {
		return cmp.Or(compareGroups(a.Group, b.Group), cmp.Compare(a.Liveness, b.Liveness),
			cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.TargetValue, b.TargetValue))
	}
	slices.SortFunc(all, func(a, b admin.Figure) int { return cmp.Or(same(&a, &b), a.At.Compare(b.At)) })
	out := all[:0]
	for i := range all {
		// out only ever writes below i, or to i itself: all[i-1] and
		// all[i] are still as sorted.
		if i > 0 && same(&all[i-1], &all[i]) == 0 {
			out[len(out)-1] = all[i] // sorted by time last: the later one wins
			continue
		}
		out = append(out, all[i])
	}
	return out
}

// labelsOf builds each row's label pairs once per scrape; every family of
// the rows shares them. The pairs are sorted by name, as a registry's are.
func labelsOf(rows int, values func(i int) []string, names []string) [][]*dto.LabelPair {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(names[a], names[b]) })
	// One allocation for every row's pairs and one for the pointers to
	// them, rather than two a row.
	n := len(names)
	out := make([][]*dto.LabelPair, rows)
	pairs := make([]dto.LabelPair, rows*n)
	ptrs := make([]*dto.LabelPair, rows*n)
	for i := range rows {
		vs := values(i)
		out[i] = ptrs[i*n : (i+1)*n : (i+1)*n]
		for j, k := range order {
			p := &pairs[i*n+j]
			p.Name, p.Value = &names[k], &vs[k]
			out[i][j] = p
		}
	}
	return out
}
