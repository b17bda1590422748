package main

import "fmt"

// hygieneRows put 10k hygiene targets next to the same targets with
// hygiene off, measured one after the other in one process on one Redis.
func hygieneRows(l *lookup) []Row {
	var rows []Row
	for _, n := range sizes(l.res, "HygieneTargets/targets=") {
		b := "HygieneTargets/targets=" + n
		load := count(float64(atoi(n))) + " groups, 1% with a ghost holding an entry, each polled once; hygiene on defaults (scan 10 s, 4 workers), dry run"
		off := "the same targets with hygiene off (polled once, then read by nothing), a pelwarden process of its own, same run"
		mem := func(sfx string) Figure {
			heap, rss, g := l.get(b, "heap-MB"+sfx), l.get(b, "rss-MB"+sfx), l.get(b, "goroutines"+sfx)
			return Figure{Labels: []string{"heap", "rss"}, Values: []float64{heap, rss}, Unit: "MB",
				Text: fmt.Sprintf("heap in use %.1f MB, RSS %.0f MB, %.0f goroutines", heap, rss, g)}
		}
		ops := l.get(b, "redis-ops/s-hygiene")
		rows = append(rows,
			l.row(Row{What: "Redis commands per group and scan interval at steady state (INFO stats; goal: at most a read's 3, TIME, XINFO GROUPS, XINFO CONSUMERS)", Workload: load,
				Pelwarden: Figure{Values: []float64{l.get(b, "cmds/group/scan-hygiene"), ops}, Labels: []string{"per group and interval", "per second"}, Unit: "commands",
					Text: fmt.Sprintf("%.2f commands (%s commands/s)", l.get(b, "cmds/group/scan-hygiene"), count(ops))},
				Against: off, Baseline: ptr(rate(l.get(b, "redis-ops/s-off"), "commands/s"))}),
			l.row(Row{What: "one KEDA poll meanwhile, p50 / p99 (goal: p99 within 1.5×)", Workload: load,
				Pelwarden: latency(l.get(b, "poll-p50-µs-hygiene"), l.get(b, "poll-p99-µs-hygiene")),
				Against:   off, Baseline: ptr(latency(l.get(b, "poll-p50-µs-off"), l.get(b, "poll-p99-µs-off")))}),
			l.row(Row{What: "pelwarden process at steady state (its own process, as deployed): heap in use, RSS (goal: RSS at most 128 MB), goroutines", Workload: load,
				Pelwarden: mem("-hygiene"), Against: off, Baseline: ptr(mem("-off"))}),
		)
	}
	return rows
}
