package admin

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Report is the value GetMetrics last reported for one metric of one
// target, with the parts of its request that say what the value means. It
// keeps those alone, not the whole request.
type Report struct {
	// Target is the group with the liveness settings its value was judged
	// by: two triggers on one group with other settings get other values.
	Target      liveness.Target
	Metric      policy.Metric
	TargetValue float64
	Activation  float64
	// MetricName is the name KEDA asked under, last; it names the value
	// and is no part of it.
	MetricName string
	Value      int64
	At         time.Time
}

// MaxReportsPerTarget bounds the metrics one target keeps reports of: a
// target has three metric kinds, and each ScaledObject on it one
// per-replica target and activation. Past it the least recently reported
// is forgotten; it comes back with its trigger's next poll.
const MaxReportsPerTarget = 8

// Reports keeps the last value reported to KEDA per target and metric
// asked (its kind, per-replica target and activation), so DescribeTarget
// and /metrics show what the autoscaler was told. Each trigger's figures
// are its own: a trigger with other liveness settings or another metric
// on the same group is another report, never an overwrite, and the values
// of one report are those of its own target's snapshot. Reports go with
// their target (Forget). It is safe for concurrent use.
type Reports struct {
	max int

	mu       sync.Mutex
	byTarget map[liveness.TargetKey][]reported
}

// reported is a Report as kept: its target is its key's (TargetKey.Target),
// since a copy beside the key doubled what a target's reports held.
type reported struct {
	Metric      policy.Metric
	TargetValue float64
	Activation  float64
	MetricName  string
	Value       int64
	At          time.Time
}

func (f reported) report(k liveness.TargetKey) Report {
	return Report{Target: k.Target(), Metric: f.Metric, TargetValue: f.TargetValue, Activation: f.Activation,
		MetricName: f.MetricName, Value: f.Value, At: f.At}
}

// NewReports keeps the reports of at most max targets (0 means 10000);
// past that the target reported least recently is forgotten.
func NewReports(maxTargets int) *Reports {
	if maxTargets <= 0 {
		maxTargets = 10000
	}
	return &Reports{max: maxTargets, byTarget: make(map[liveness.TargetKey][]reported)}
}

// Record stores a reported value.
func (r *Reports) Record(req metadata.Request, metricName string, value int64, at time.Time) {
	k := req.Target.Comparable()
	r.mu.Lock()
	defer r.mu.Unlock()
	reps, ok := r.byTarget[k]
	if !ok && len(r.byTarget) >= r.max {
		r.forgetOldest()
	}
	for i := range reps {
		if p := &reps[i]; p.Metric == req.Metric && p.TargetValue == req.TargetValue && p.Activation == req.Activation {
			p.MetricName, p.Value, p.At = metricName, value, at
			return
		}
	}
	rep := reported{Metric: req.Metric, TargetValue: req.TargetValue, Activation: req.Activation,
		MetricName: metricName, Value: value, At: at}
	if len(reps) >= MaxReportsPerTarget {
		oldest := slices.IndexFunc(reps, func(p reported) bool {
			return !slices.ContainsFunc(reps, func(q reported) bool { return q.At.Before(p.At) })
		})
		reps = slices.Delete(reps, oldest, oldest+1)
	}
	r.byTarget[k] = append(reps, rep)
}

// forgetOldest drops the target whose newest report is the oldest.
func (r *Reports) forgetOldest() {
	var oldest liveness.TargetKey
	var at time.Time
	first := true
	for k, reps := range r.byTarget {
		newest := slices.MaxFunc(reps, func(a, b reported) int { return a.At.Compare(b.At) }).At
		if first || newest.Before(at) {
			oldest, at, first = k, newest, false
		}
	}
	delete(r.byTarget, oldest)
}

// Forget drops a target's reports, when it expires.
func (r *Reports) Forget(t liveness.Target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byTarget, t.Comparable())
}

// For returns the reports of every target on a group, sorted by liveness
// settings, metric, per-replica target and activation.
func (r *Reports) For(g liveness.GroupRef) []Report {
	r.mu.Lock()
	var out []Report
	for k, reps := range r.byTarget {
		if k.Group() == g {
			for _, f := range reps {
				out = append(out, f.report(k))
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, compareReports)
	return out
}

// Figure is a report as the metrics page shows it: the group and the
// liveness settings' text (Spec.String) stand for the target, a third of
// a Report's bytes, since a scrape holds one for every target.
type Figure struct {
	Group       liveness.GroupRef
	Liveness    string
	Metric      policy.Metric
	TargetValue float64
	Value       int64
	At          time.Time
}

// Figures returns every report, in no order, for the metrics page. The
// text of each liveness spec is made once a call, however many targets
// share it.
func (r *Reports) Figures() []Figure {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, reps := range r.byTarget {
		n += len(reps)
	}
	out := make([]Figure, 0, n)
	texts := map[liveness.Spec]string{}
	for k, reps := range r.byTarget {
		spec := k.Target().Spec
		text, ok := texts[spec]
		if !ok {
			text = spec.String()
			texts[spec] = text
		}
		for _, f := range reps {
			out = append(out, Figure{Group: k.Group(), Liveness: text, Metric: f.Metric, TargetValue: f.TargetValue, Value: f.Value, At: f.At})
		}
	}
	return out
}

func compareReports(a, b Report) int {
	return cmp.Or(cmp.Compare(a.Target.Spec.String(), b.Target.Spec.String()), cmp.Compare(a.Metric, b.Metric),
		cmp.Compare(a.TargetValue, b.TargetValue), cmp.Compare(a.Activation, b.Activation))
}

func metricValue(rep Report, now time.Time) *pelwardenv1.MetricValue {
	return &pelwardenv1.MetricValue{
		MetricName:  rep.MetricName,
		Metric:      rep.Metric.Key(),
		Value:       rep.Value,
		TargetValue: rep.TargetValue,
		Activation:  rep.Activation,
		Active:      policy.Active(rep.Value, rep.Activation),
		AgeMs:       now.Sub(rep.At).Milliseconds(),
		Liveness:    rep.Target.Spec.String(),
	}
}
