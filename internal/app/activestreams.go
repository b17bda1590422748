package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/scaler"
)

// registerActiveStats exports how much work the StreamIsActive streams
// cause: a flood of streams on one target should move the streams gauge
// and leave the targets gauge and the evaluations counter where they were.
func registerActiveStats(reg prometheus.Registerer, sc *scaler.Server) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pelwarden_scaler_active_targets",
			Help: "Targets with a StreamIsActive stream open: each read and evaluated once for all its streams, whatever their number and thresholds.",
		}, func() float64 { targets, _, _ := sc.ActiveStats(); return float64(targets) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pelwarden_scaler_active_evaluations_total",
			Help: "Reads of a target evaluated for the answers of its StreamIsActive streams: one per read, however many streams share it.",
		}, func() float64 { _, evaluations, _ := sc.ActiveStats(); return float64(evaluations) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pelwarden_scaler_active_stream_wakes_total",
			Help: "StreamIsActive streams woken to send: when their answer changed, or at their resend.",
		}, func() float64 { _, _, wakes := sc.ActiveStats(); return float64(wakes) }),
	)
}
