package main

import "fmt"

// modeRows set each figure measured on a 3-master cluster beside the same
// measured on one server in the same run, and the guarded requeue with
// waitReplicas: 1 beside it without, on a master with one replica.
func modeRows(l *lookup) []Row {
	const pre = "Modes/"
	single := "the same on one redis-server"
	var rows []Row
	for _, n := range sizes(l.res, pre+"poll/consumers=") {
		p := pre + "poll/consumers=" + n + "/mode="
		rows = append(rows, l.row(Row{What: "one KEDA poll on a 3-master Redis Cluster (GetMetrics + IsActive, KEDA's client), p50 / p99", Workload: n + " consumers",
			Pelwarden: latency(l.get(p+"cluster", "p50-µs"), l.get(p+"cluster", "p99-µs")),
			Against:   single, Baseline: ptr(latency(l.get(p+"single", "p50-µs"), l.get(p+"single", "p99-µs")))}))
	}
	for _, n := range sizes(l.res, pre+"refresh/consumers=") {
		p := pre + "refresh/consumers=" + n + "/mode="
		rows = append(rows, l.row(Row{What: "one read of a target on a 3-master Redis Cluster, p50 / p99", Workload: n + " consumers",
			Pelwarden: latency(l.get(p+"cluster", "p50-µs"), l.get(p+"cluster", "p99-µs")),
			Against:   single, Baseline: ptr(latency(l.get(p+"single", "p50-µs"), l.get(p+"single", "p99-µs")))}))
	}
	load := fmt.Sprintf("%s-entry ghost PEL, batches of 1000, median of 3 runs a side, sides alternating", count(20000))
	rows = append(rows,
		l.row(Row{What: "guarded requeue of a ghost's PEL on a 3-master Redis Cluster", Workload: load,
			Pelwarden: rate(l.get(pre+"reclaim", "entries/s-cluster"), "entries/s"),
			Against:   single, Baseline: ptr(rate(l.get(pre+"reclaim", "entries/s-single"), "entries/s"))}),
		l.row(Row{What: "guarded requeue of a ghost's PEL with waitReplicas: 1 (WAIT after each batch), master + one replica", Workload: load,
			Pelwarden: rate(l.get(pre+"reclaim-wait", "entries/s-wait1"), "entries/s"),
			Against:   "the same master and replica, waitReplicas: 0", Baseline: ptr(rate(l.get(pre+"reclaim-wait", "entries/s-wait0"), "entries/s"))}),
	)
	return rows
}
