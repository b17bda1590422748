package main

import "fmt"

// pollFloor is the benchmark that polls pelwarden and a no-op external
// scaler, each in its own process, in one run.
const pollFloor = "PollFloor"

// floorRows compare a KEDA poll of pelwarden with the least any external
// scaler can cost: latency, throughput, and what a served poll allocates
// in the server process, in all and beyond the floor's. The throughput's
// ratio is the median of the ratios of alternating pairs of rounds, not
// the ratio of the medians: each pair ran under the same load.
func floorRows(l *lookup) []Row {
	seq, par := pollFloor+"/sequential", pollFloor+"/parallel"
	against := "a no-op ExternalScaler answering constants, its own process (the transport floor)"
	load := fmt.Sprintf("%.0f consumers; both servers in their own process, same client", l.get(seq, "consumers"))
	side := func(server string) Figure {
		return latency(l.get(seq, server+"-p50-µs"), l.get(seq, server+"-p99-µs"))
	}
	allocated := func(server string) Figure {
		b, n := l.get(seq, server+"-server-B/poll"), l.get(seq, server+"-server-allocs/poll")
		return Figure{Labels: []string{"bytes", "allocs"}, Values: []float64{b, n}, Unit: "per poll",
			Text: fmt.Sprintf("%.2f KB, %.0f allocs", b/1024, n)}
	}
	rounds := fmt.Sprintf("%s; %.0f alternating pairs of rounds, pair ratios %.2f–%.2f",
		load, l.get(par, "pairs"), l.get(par, "ratio-min"), l.get(par, "ratio-max"))
	throughput := l.row(Row{What: "poll throughput, 4 callers per CPU (median of rounds; ratio: median of pairs)", Workload: rounds,
		Pelwarden: rate(l.get(par, "pelwarden-polls/s"), "polls/s"), Against: against,
		Baseline: ptr(rate(l.get(par, "noop-scaler-polls/s"), "polls/s"))})
	throughput.Ratio = []float64{l.get(par, "ratio-median")}
	own := allocated("pelwarden")
	floor := allocated("noop-scaler")
	beyond := Figure{Labels: own.Labels, Unit: own.Unit, Values: []float64{own.Values[0] - floor.Values[0], own.Values[1] - floor.Values[1]}}
	beyond.Text = fmt.Sprintf("%.2f KB, %.0f allocs", beyond.Values[0]/1024, beyond.Values[1])
	alloc := l.row(Row{What: "allocated in the server process per served poll (Go runtime counters), bytes / allocations", Workload: load,
		Pelwarden: allocated("pelwarden"), Against: against, Baseline: ptr(allocated("noop-scaler"))})
	return []Row{
		l.row(Row{What: "one KEDA poll (GetMetrics + IsActive, KEDA's client), p50 / p99", Workload: load,
			Pelwarden: side("pelwarden"), Against: against, Baseline: ptr(side("noop-scaler"))}),
		throughput,
		alloc,
		{What: "allocated per served poll beyond the floor's (pelwarden's own share: its server minus the floor's, same run)",
			Workload: load, Pelwarden: beyond, Commands: alloc.Commands},
	}
}
