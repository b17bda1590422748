package scaler

import (
	"strings"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
)

// RefusedMetricName names the placeholder spec GetMetricSpec answers for a
// refused trigger. No trigger's own metric has this name: those are
// pelwarden-<redis>-<stream>-<group>, with three parts after the prefix.
const RefusedMetricName = "pelwarden-refused"

// refusedSpec is the placeholder: a target of 1 that is never served,
// since GetMetrics refuses the trigger, or the name once it parses.
func refusedSpec() *externalscaler.GetMetricSpecResponse {
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{
		MetricName: RefusedMetricName, TargetSize: 1, TargetSizeFloat: 1,
	}}}
}

// IsRefusedSpec says a GetMetricSpec answer is the placeholder of a
// refused trigger.
func IsRefusedSpec(a *externalscaler.GetMetricSpecResponse) bool {
	specs := a.GetMetricSpecs()
	return len(specs) == 1 && specs[0].GetMetricName() == RefusedMetricName
}

// IsRefusedMetric says a metric name asked of GetMetrics is the
// placeholder's, with or without the s<index>- prefix KEDA gives a
// trigger's metric (KEDA strips it before asking; other callers may not).
func IsRefusedMetric(name string) bool {
	if name == RefusedMetricName {
		return true
	}
	rest, ok := strings.CutPrefix(name, "s")
	if !ok {
		return false
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	return digits > 0 && rest[digits:] == "-"+RefusedMetricName
}
