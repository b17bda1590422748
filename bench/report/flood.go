package main

import (
	"fmt"
	"slices"
	"strings"
)

// chartMemoryLimitMB is the chart's default memory limit
// (charts/pelwarden/values.yaml resources.limits.memory, 256Mi): the
// flood benchmarks' RSS goal.
const chartMemoryLimitMB = 256

// floodLoads say what each class of BenchmarkFlood sends, as the
// benchmark sends it at full size.
var floodLoads = map[string]string{
	"bytes":                            "4 callers sending 3 MB metadata values, metric names and namespaces, each new",
	"regex":                            "4 callers sending a new 1 MB ownerMatch regex on every call, to GetMetricSpec and the Admin API's CheckTrigger",
	"stream-is-active":                 "4 callers opening StreamIsActive streams on the polled stream, from new namespaces, over 4 targets, that stay inactive, and retrying past the caps",
	"stream-is-active-thresholds":      "the same, every stream with an activation threshold of its own",
	"stream-is-active-targets":         "the same, every stream a target of its own (its own ghostIdleSeconds on the polled group), refused past scaler.maxActiveTargetsPerGroup",
	"pod-watches":                      "4 callers naming a new podSelector on every call, each from a namespace of its own (its share of the watches), through a real kube-apiserver",
	"pod-watches-client-go-rate-limit": "the same, with client-go's default rate limit (kubernetes.apiQPS 5, apiBurst 10)",
	"namespaces":                       "4 callers sending triggers asking for reclaim, each from a new namespace and on a new stream; the most open trigger policy",
}

// floodRows put, for each class of BenchmarkFlood found, a legitimate
// poll during the flood next to the same poll on the quiet pelwarden, the
// pelwarden process's peak memory and goroutines, and Redis's commands per
// XADD both ways. Each class ran in a pelwarden serve process of its own,
// the flood in another, each on a CPU of its own.
func floodRows(l *lookup) []Row {
	var rows []Row
	for _, c := range floodClassesFound(l.res) {
		b := "Flood/" + c
		load := floodLoads[c]
		if load == "" {
			load = c
		}
		load = fmt.Sprintf("%s: %s calls/s, %.0f%% refused", load, count(l.get(b, "flood-calls/s")), 100*l.get(b, "refused-share"))
		quiet := "the same, before the flood, same process"
		rss, g := l.get(b, "peak-rss-MB"), l.get(b, "goroutines")
		process := fmt.Sprintf("peak RSS %.0f MB, %.0f goroutines", rss, g)
		if _, ok := l.res[b].metrics["attacker-cpu"]; ok {
			process += fmt.Sprintf("; pelwarden used %.0f%% of its CPU (%.0f%% quiet), the attacker %.0f%% of its own",
				100*l.get(b, "pelwarden-cpu-flood"), 100*l.get(b, "pelwarden-cpu-quiet"), 100*l.get(b, "attacker-cpu"))
		}
		rows = append(rows,
			l.row(Row{What: "one KEDA poll during the " + c + " flood, p50 / p99 (goal: p99 within 2× the quiet one)", Workload: load,
				Pelwarden: latency(l.get(b, "poll-p50-µs-flood"), l.get(b, "poll-p99-µs-flood")),
				Against:   quiet, Baseline: ptr(latency(l.get(b, "poll-p50-µs-quiet"), l.get(b, "poll-p99-µs-quiet")))}),
			l.row(Row{What: fmt.Sprintf("pelwarden process through the %s flood: peak RSS (goal: under the chart's %d MiB limit), most goroutines", c, chartMemoryLimitMB),
				Workload:  load,
				Pelwarden: Figure{Labels: []string{"peak rss"}, Values: []float64{rss}, Unit: "MB", Text: process}}),
			l.row(Row{What: "Redis commands per producer XADD (every 20 ms) during the " + c + " flood", Workload: load,
				Pelwarden: plainf(l.get(b, "cmds/xadd-flood"), "commands"), Against: quiet, Baseline: ptr(plainf(l.get(b, "cmds/xadd-quiet"), "commands"))}),
		)
		if _, ok := l.res[b].metrics["evaluations/xadd"]; ok {
			evals, wakes := l.get(b, "evaluations/xadd"), l.get(b, "stream-wakes/xadd")
			rows = append(rows, l.row(Row{What: "StreamIsActive evaluations of a target's answers and streams woken per producer XADD during the " + c + " flood (one evaluation a read per target, a wake only to send)",
				Workload: load, Pelwarden: Figure{Labels: []string{"evaluations", "stream wakes"}, Values: []float64{evals, wakes}, Unit: "per XADD",
					Text: fmt.Sprintf("%s evaluations, %s stream wakes", trim(fmt.Sprintf("%.2f", evals)), trim(fmt.Sprintf("%.2f", wakes)))}}))
		}
		if _, ok := l.res[b].metrics["legit-current-ms"]; ok {
			rows = append(rows, l.row(Row{What: "a legitimate ScaledObject's new podSelector, beside the flood's pod watches, until its pod is judged",
				Workload: load, Pelwarden: plain(l.get(b, "legit-current-ms"), "ms")}))
		}
	}
	return rows
}

// plainf is one value with two significant decimals, for small counts.
func plainf(v float64, unit string) Figure {
	return Figure{Values: []float64{v}, Unit: unit, Text: trim(fmt.Sprintf("%.2f", v)) + " " + unit}
}

// floodClassesFound lists the classes of BenchmarkFlood in the results, in
// the order the benchmark runs them where known.
func floodClassesFound(res results) []string {
	order := []string{"bytes", "regex", "stream-is-active", "stream-is-active-thresholds", "stream-is-active-targets", "pod-watches", "pod-watches-client-go-rate-limit", "namespaces"}
	var out []string
	for name := range res {
		if c, ok := strings.CutPrefix(name, "Flood/"); ok {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia == ib {
			return strings.Compare(a, b)
		}
		if ia < 0 {
			return 1
		}
		if ib < 0 {
			return -1
		}
		return ia - ib
	})
	return out
}
