package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// costRows set, for each size of BenchmarkCost found, what pelwarden
// costs Redis beside KEDA's built-in scaler polled alike in the same run:
// Redis's CPU net of an idle Redis's, the commands per poll, pelwarden's
// own CPU, the age of the read each answer came from, and the poll's
// latency and allocation beside a no-op external scaler's on the same
// schedule.
func costRows(l *lookup) []Row {
	var rows []Row
	for _, n := range sizes(l.res, "Cost/targets=") {
		for _, iv := range costIntervals(l.res, n) {
			b := "Cost/targets=" + n + "/interval=" + iv
			load := fmt.Sprintf("%s targets polled every %s (GetMetrics + IsActive), spread evenly; 3 live workers holding 3 entries and a ghost holding 10 per group; %s polls measured",
				count(float64(atoi(n))), iv, count(l.get(b, "polls")))
			builtin := "KEDA's built-in redis-streams scaler polled alike (one XPENDING summary per poll), its own Redis, same run"
			cpu := func(side string) Figure {
				v := l.get(b, "redis-cpu-%-"+side)
				return Figure{Values: []float64{v}, Unit: "% of a core", Text: fmt.Sprintf("%.3f%% of a core", v)}
			}
			cpuRow := l.row(Row{What: "Redis CPU, net of an idle Redis with the same groups (goal: at most 0.5× the built-in's)", Workload: load,
				Pelwarden: cpu("pelwarden"), Against: builtin, Baseline: ptr(cpu("builtin"))})
			cpuRow.Ratio = []float64{l.get(b, "redis-cpu-ratio")}
			own := l.get(b, "pelwarden-cpu-%")
			goal := ""
			if iv == "30s" {
				goal = " (goal: at most 1% per 1,000 targets)"
			}
			rows = append(rows, cpuRow,
				l.row(Row{What: "Redis commands per poll (INFO commandstats)", Workload: load,
					Pelwarden: plainUnit(l.get(b, "cmds/poll-pelwarden"), "commands"), Against: builtin,
					Baseline: ptr(plainUnit(l.get(b, "cmds/poll-builtin"), "commands"))}),
				l.row(Row{What: "pelwarden's own CPU, its process, as deployed" + goal, Workload: load,
					Pelwarden: Figure{Values: []float64{own}, Unit: "% of a core",
						Text: fmt.Sprintf("%.2f%% of a core, %.2f%% per 1,000 targets", own, l.get(b, "pelwarden-cpu-%-per-1k"))},
					Against:  "the no-op external scaler serving the same polls (gRPC and KEDA's protocol alone)",
					Baseline: ptr(Figure{Values: []float64{l.get(b, "noop-cpu-%")}, Unit: "% of a core", Text: fmt.Sprintf("%.2f%% of a core", l.get(b, "noop-cpu-%"))})}),
				l.row(Row{What: "freshness: age of the read a poll is answered from, p50 / p99 / most, as the upper bounds of their 100 ms buckets (goal: p99 at most 1 s)", Workload: load,
					Pelwarden: Figure{Labels: []string{"p50", "p99", "max"}, Unit: "ms",
						Values: []float64{l.get(b, "fresh-p50-ms"), l.get(b, "fresh-p99-ms"), l.get(b, "fresh-max-ms")},
						Text:   fmt.Sprintf("≤ %s / ≤ %s / ≤ %s", dur(l.get(b, "fresh-p50-ms")/1e3), dur(l.get(b, "fresh-p99-ms")/1e3), dur(l.get(b, "fresh-max-ms")/1e3))}}),
				l.row(Row{What: "one KEDA poll (GetMetrics + IsActive, KEDA's client), p50 / p99 (goal: p99 at most 1.5× the no-op's)", Workload: load,
					Pelwarden: latency(l.get(b, "poll-p50-µs-pelwarden"), l.get(b, "poll-p99-µs-pelwarden")),
					Against:   "the no-op external scaler (bench/noopscaler) in its own process, polled on the same schedule",
					Baseline:  ptr(latency(l.get(b, "poll-p50-µs-noop"), l.get(b, "poll-p99-µs-noop")))}),
				l.row(Row{What: "allocated in the server's process per poll (the Go runtime's counter), and its garbage collections per second", Workload: load,
					Pelwarden: allocFigure(l.get(b, "alloc-KiB/poll-pelwarden"), l.get(b, "gc/s-pelwarden")),
					Against:   "the no-op external scaler serving the same polls, whose heap is a few MB",
					Baseline:  ptr(allocFigure(l.get(b, "alloc-KiB/poll-noop"), l.get(b, "gc/s-noop")))}),
			)
		}
	}
	return rows
}

// costIntervals are the polling intervals of BenchmarkCost found for n
// targets, the longest first.
func costIntervals(res results, n string) []string {
	prefix := "Cost/targets=" + n + "/interval="
	var out []string
	for name := range res {
		if iv, ok := strings.CutPrefix(name, prefix); ok {
			out = append(out, iv)
		}
	}
	sortDurations(out)
	return out
}

// allocFigure is the bytes a process allocated per poll, compared, with
// its collections per second beside them.
func allocFigure(kib, gcs float64) Figure {
	return Figure{Values: []float64{kib}, Unit: "KiB",
		Text: fmt.Sprintf("%.1f KiB per poll; %.1f collections/s", kib, gcs)}
}

func plainUnit(v float64, unit string) Figure {
	return Figure{Values: []float64{v}, Unit: unit, Text: fmt.Sprintf("%.2f %s", v, unit)}
}

// sortDurations orders durations written as Go durations, the longest
// first; one that does not parse goes last.
func sortDurations(ds []string) {
	d := func(s string) time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			return -1
		}
		return v
	}
	slices.SortFunc(ds, func(a, b string) int { return int(d(b) - d(a)) })
}
