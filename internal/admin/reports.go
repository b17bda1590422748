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

// Report is the value GetMetrics last reported for one metric name, with
// the parts of its request that say what the value means. It keeps those
// alone, not the whole request: there is one per ScaledObject.
type Report struct {
	Group       liveness.GroupRef
	Metric      policy.Metric
	TargetValue float64
	Activation  float64
	MetricName  string
	Value       int64
	At          time.Time
}

// Reports keeps the last value reported to KEDA per group and metric name,
// so DescribeTarget can show what the autoscaler was told. It is safe for
// concurrent use.
type Reports struct {
	max int

	mu      sync.Mutex
	reports map[reportKey]Report
}

type reportKey struct {
	group liveness.GroupRef
	name  string
}

// NewReports keeps at most max reports (0 means 10000); past that the
// oldest is forgotten.
func NewReports(maxReports int) *Reports {
	if maxReports <= 0 {
		maxReports = 10000
	}
	return &Reports{max: maxReports, reports: make(map[reportKey]Report)}
}

// Record stores a reported value.
func (r *Reports) Record(req metadata.Request, metricName string, value int64, at time.Time) {
	k := reportKey{group: req.Target.GroupRef, name: metricName}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.reports[k]; !ok && len(r.reports) >= r.max {
		var oldest reportKey
		first := true
		for key, rep := range r.reports {
			if first || rep.At.Before(r.reports[oldest].At) {
				oldest, first = key, false
			}
		}
		delete(r.reports, oldest)
	}
	r.reports[k] = Report{Group: req.Target.GroupRef, Metric: req.Metric, TargetValue: req.TargetValue, Activation: req.Activation,
		MetricName: metricName, Value: value, At: at}
}

// Forget drops a group's reports, when its target expires.
func (r *Reports) Forget(g liveness.GroupRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.reports {
		if k.group == g {
			delete(r.reports, k)
		}
	}
}

// For returns a group's reports sorted by metric name.
func (r *Reports) For(g liveness.GroupRef) []Report {
	r.mu.Lock()
	var out []Report
	for k, rep := range r.reports {
		if k.group == g {
			out = append(out, rep)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Report) int { return cmp.Compare(a.MetricName, b.MetricName) })
	return out
}

// All returns every report, in no order, for the metrics page.
func (r *Reports) All() []Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Report, 0, len(r.reports))
	for _, rep := range r.reports {
		out = append(out, rep)
	}
	return out
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
	}
}
