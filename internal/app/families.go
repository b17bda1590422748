package app

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// registry is the registry New registers pelwarden's collectors with. It
// keeps them, so that MetricFamilies can tell a vector's type before it
// has a series.
type registry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func newRegistry() *registry { return &registry{Registry: prometheus.NewRegistry()} }

func (r *registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// MetricFamily describes one family /metrics serves.
type MetricFamily struct {
	Name, Type, Help string
	// Labels are the family's labels, as declared.
	Labels []string
}

// MetricFamilies lists, by name, the families a's /metrics serves: those
// of every collector registered, described (a family whose collector has
// no series yet is listed too), and the per-target ones the handler
// writes beside them. The Go runtime and process collectors' families are
// left out: they are client_golang's, and change with the Go release.
func (a *App) MetricFamilies() ([]MetricFamily, error) {
	skip := map[string]bool{}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		for _, d := range describe(c) {
			skip[d.String()] = true
		}
	}
	var out []MetricFamily
	for _, c := range a.reg.collectors {
		kinds := collectedKinds(c)
		for _, d := range describe(c) {
			if skip[d.String()] {
				continue
			}
			f, err := parseDesc(d)
			if err != nil {
				return nil, err
			}
			if f.Type = cmp.Or(kinds[d.String()], vectorKind(c)); f.Type == "" {
				return nil, fmt.Errorf("%s: its collector (%T) has no series to tell its type by", f.Name, c)
			}
			out = append(out, f)
		}
	}
	out = append(out, targetFamilies()...)
	slices.SortFunc(out, func(x, y MetricFamily) int { return cmp.Compare(x.Name, y.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("%s is served twice", out[i].Name)
		}
	}
	return out, nil
}

// targetFamilies are the per-target families of exposition.go.
func targetFamilies() []MetricFamily {
	var out []MetricFamily
	gauge := strings.ToLower(dto.MetricType_GAUGE.String())
	for _, f := range append(slices.Clone(judgedFamilies), failingFamily) {
		out = append(out, MetricFamily{f.name, gauge, f.help, judgedLabels})
	}
	for _, f := range groupFamilies {
		out = append(out, MetricFamily{f.name, gauge, f.help, liveness.LabelNames})
	}
	for _, f := range reportFamilies {
		out = append(out, MetricFamily{f.name, gauge, f.help, reportLabels})
	}
	for _, f := range hygieneFamilies {
		out = append(out, MetricFamily{f.name, strings.ToLower(f.kind.String()), f.help, liveness.LabelNames})
	}
	return out
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// collectedKinds are the types of the series c has now, by their Desc.
func collectedKinds(c prometheus.Collector) map[string]string {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	kinds := map[string]string{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		kind := ""
		switch {
		case pb.Counter != nil:
			kind = "counter"
		case pb.Gauge != nil:
			kind = "gauge"
		case pb.Histogram != nil:
			kind = "histogram"
		case pb.Summary != nil:
			kind = "summary"
		case pb.Untyped != nil:
			kind = "untyped"
		}
		kinds[m.Desc().String()] = kind
	}
	return kinds
}

// vectorKind is the type of a vector's family, which has no series until
// its first label values are seen.
func vectorKind(c prometheus.Collector) string {
	switch c := c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	case interface{ metricKind() string }:
		return c.metricKind()
	}
	return ""
}

// descText matches Desc.String, the only view client_golang gives of a
// Desc's name, help and labels.
var descText = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func parseDesc(d *prometheus.Desc) (MetricFamily, error) {
	m := descText.FindStringSubmatch(d.String())
	if m == nil {
		return MetricFamily{}, fmt.Errorf("cannot read %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return MetricFamily{}, err
	}
	help, err := strconv.Unquote(m[2])
	if err != nil {
		return MetricFamily{}, err
	}
	f := MetricFamily{Name: name, Help: help}
	for _, part := range []string{m[3], m[4]} {
		for l := range strings.SplitSeq(part, ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				f.Labels = append(f.Labels, l)
			}
		}
	}
	return f, nil
}
