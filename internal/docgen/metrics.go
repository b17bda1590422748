package docgen

import (
	"bytes"
	"strings"

	"github.com/pelwarden/pelwarden/internal/app"
)

// Metrics is docs/reference/metrics.md: the families an App's /metrics
// serves (app.App.MetricFamilies).
func Metrics(families []app.MetricFamily) (Page, error) {
	return page("docs/reference/metrics.md", "the collectors internal/app registers", func(b *bytes.Buffer) error {
		b.WriteString("# Metrics reference\n\n")
		b.WriteString("Every metric family pelwarden serves on `/metrics` (`http.addr`), besides the Go runtime's `go_*` and the " +
			"process's `process_*` families. A family appears once it has a series: per-target families once a target is read, " +
			"`pelwarden_tls_*` with `grpc.tls`, `pelwarden_pod_watch_state` with `kubernetes.enabled`.\n\n")
		header(b, "name", "type", "labels", "help")
		for _, f := range families {
			labels := make([]string, len(f.Labels))
			for i, l := range f.Labels {
				labels[i] = code(l)
			}
			row(b, code(f.Name), f.Type, strings.Join(labels, ", "), f.Help)
		}
		return nil
	})
}
