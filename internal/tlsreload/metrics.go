package tlsreload

import (
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics reports reloads to Prometheus. A nil *Metrics reports nothing.
type Metrics struct {
	reloads  *prometheus.CounterVec
	lastOK   prometheus.Gauge
	notAfter prometheus.Gauge
}

// NewMetrics registers the reload metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pelwarden_tls_reloads_total",
			Help: "Loads of the gRPC TLS files (the first at start, then each change), by result: success or failure.",
		}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pelwarden_tls_last_reload_successful",
			Help: "1 when the gRPC TLS files as they are now on disk are the ones served; 0 while a change could not be loaded.",
		}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pelwarden_tls_cert_not_after_seconds",
			Help: "Expiry (Unix seconds) of the gRPC server certificate being served.",
		}),
	}
	// Both series exist from the start, so rate() and alerts see a zero.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	reg.MustRegister(m.reloads, m.lastOK, m.notAfter)
	return m
}

// loaded records a successful load of leaf.
func (m *Metrics) loaded(leaf *x509.Certificate) {
	if m == nil {
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastOK.Set(1)
	m.notAfter.Set(float64(leaf.NotAfter.Unix()))
}

// failed records a change that could not be loaded.
func (m *Metrics) failed() {
	if m == nil {
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.lastOK.Set(0)
}

// recovered records that the files on disk are again the ones served.
func (m *Metrics) recovered() {
	if m != nil {
		m.lastOK.Set(1)
	}
}
