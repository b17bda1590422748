package main

import "fmt"

// pollFloor is the benchmark that polls pelwarden and a no-op external
// scaler, each in its own process, in one run.
const pollFloor = "PollFloor"

// floorRows compare a KEDA poll of pelwarden with the least any external
// scaler can cost: latency, throughput, and what a served poll allocates
// in the server process.
func floorRows(l *lookup) []Row {
	seq := pollFloor + "/sequential"
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
	return []Row{
		l.row(Row{What: "one KEDA poll (GetMetrics + IsActive, KEDA's client), p50 / p99", Workload: load,
			Pelwarden: side("pelwarden"), Against: against, Baseline: ptr(side("noop-scaler"))}),
		l.row(Row{What: "poll throughput, 4 callers per CPU", Workload: load,
			Pelwarden: rate(l.get(pollFloor+"/pelwarden/parallel", "polls/s"), "polls/s"), Against: against,
			Baseline: ptr(rate(l.get(pollFloor+"/noop-scaler/parallel", "polls/s"), "polls/s"))}),
		l.row(Row{What: "allocated in the server process per served poll (Go runtime counters), bytes / allocations", Workload: load,
			Pelwarden: allocated("pelwarden"), Against: against, Baseline: ptr(allocated("noop-scaler"))}),
	}
}
