package app

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// placeholderHPAs names the ScaledObjects whose HPA still asks for the
// placeholder metric of a trigger pelwarden now serves. KEDA's operator
// rebuilds the HPA itself once the trigger's poll succeeds (the
// ScaledObject turns Ready); one that stays is for a human, whom the
// PelwardenHPAOnPlaceholder alert names it to. Anyone who reaches the
// port can ask, so at most maxPlaceholderHPAs are named at once, each for
// placeholderMemory after its last ask.
type placeholderHPAs struct {
	desc *prometheus.Desc
	now  func() time.Time

	mu   sync.Mutex
	seen map[placeholderHPA]time.Time
}

type placeholderHPA struct{ namespace, name string }

const (
	maxPlaceholderHPAs = 100
	placeholderMemory  = 10 * time.Minute
)

func newPlaceholderHPAs(reg prometheus.Registerer) *placeholderHPAs {
	p := &placeholderHPAs{
		desc: prometheus.NewDesc("pelwarden_scaler_placeholder_hpas",
			"1 for a ScaledObject whose HPA asked, in the last 10 minutes, for the placeholder metric (pelwarden-refused) of a trigger pelwarden serves now: "+
				"KEDA has not rebuilt the HPA; at most 100 are named.",
			[]string{"scaledobject_namespace", "scaledobject"}, nil),
		now: time.Now, seen: map[placeholderHPA]time.Time{},
	}
	reg.MustRegister(p)
	return p
}

// asked is scaler.Options.OnPlaceholder.
func (p *placeholderHPAs) asked(namespace, name string) {
	k := placeholderHPA{namespace, name}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.seen[k]; !ok && len(p.seen) >= maxPlaceholderHPAs {
		p.forget(now)
		if len(p.seen) >= maxPlaceholderHPAs {
			return
		}
	}
	p.seen[k] = now
}

// forget drops the ScaledObjects not asked about within
// placeholderMemory; p.mu is held.
func (p *placeholderHPAs) forget(now time.Time) {
	for k, at := range p.seen {
		if now.Sub(at) > placeholderMemory {
			delete(p.seen, k)
		}
	}
}

// metricKind tells MetricFamilies the family's type before it has a
// series.
func (p *placeholderHPAs) metricKind() string { return "gauge" }

func (p *placeholderHPAs) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *placeholderHPAs) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forget(p.now())
	for k := range p.seen {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, 1, liveness.LabelValue(k.namespace), liveness.LabelValue(k.name))
	}
}
