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

// Report is the value GetMetrics last reported for one metric name.
type Report struct {
	Request    metadata.Request
	MetricName string
	Value      int64
	At         time.Time
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
	k := reportKey{group: groupOf(req), name: metricName}
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
	r.reports[k] = Report{Request: req, MetricName: metricName, Value: value, At: at}
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

func groupOf(req metadata.Request) liveness.GroupRef {
	return req.Target.GroupRef
}

func metricValue(rep Report, now time.Time) *pelwardenv1.MetricValue {
	return &pelwardenv1.MetricValue{
		MetricName:  rep.MetricName,
		Metric:      rep.Request.Metric.Key(),
		Value:       rep.Value,
		TargetValue: rep.Request.TargetValue,
		Activation:  rep.Request.Activation,
		Active:      policy.Active(rep.Value, rep.Request.Activation),
		AgeMs:       now.Sub(rep.At).Milliseconds(),
	}
}
