package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/scaler"
)

// registerActiveStats exports how much work the StreamIsActive streams
// cause: a flood of streams on one target should move the streams gauge
// and leave the groups gauge and the answers counter where they were.
func registerActiveStats(reg prometheus.Registerer, sc *scaler.Server) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pelwarden_scaler_active_groups",
			Help: "StreamIsActive answers kept: one per target, metric and activation with a stream open, however many streams share it.",
		}, func() float64 { groups, _, _ := sc.ActiveStats(); return float64(groups) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pelwarden_scaler_active_answers_total",
			Help: "StreamIsActive answers computed, once per group for every read of its target.",
		}, func() float64 { _, answers, _ := sc.ActiveStats(); return float64(answers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pelwarden_scaler_active_stream_wakes_total",
			Help: "StreamIsActive streams woken to send: when their group's answer changed, or at their resend.",
		}, func() float64 { _, _, wakes := sc.ActiveStats(); return float64(wakes) }),
	)
}
