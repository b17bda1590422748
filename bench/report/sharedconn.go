package main

import "fmt"

// sharedConnRows put a served trigger's poll on KEDA's one connection,
// beside one tenant's broken ScaledObjects on the same connection, next
// to the same poll alone, in the same run; with pelwarden's CPU and the
// refused polls a second.
func sharedConnRows(l *lookup) []Row {
	var rows []Row
	for _, c := range []struct{ name, what string }{
		{"another-namespace", "of another namespace"},
		{"same-namespace", "of the broken ScaledObjects' own namespace"},
	} {
		b := "SharedConnection/" + c.name
		load := fmt.Sprintf("KEDA's one connection: 1000 broken ScaledObjects (pendingEntriesCount: notanumber) and 20 with 900 KB of metadata, "+
			"each polled once a second (%s polls refused/s); pelwarden used %.1f%% of its CPU (%.1f%% alone), the KEDA side %.0f%% of its own",
			count(l.get(b, "refused/s")), 100*l.get(b, "pelwarden-cpu-attacked"), 100*l.get(b, "pelwarden-cpu-quiet"), 100*l.get(b, "keda-cpu-attacked"))
		pmm := func(p50, p99, maxUs float64) Figure {
			f := latency(p50, p99)
			f.Labels = append(f.Labels, "max")
			f.Values = append(f.Values, maxUs)
			f.Text += " / " + dur(maxUs/1e6)
			return f
		}
		rows = append(rows, l.row(Row{
			What:      "a served trigger " + c.what + " polled every 100 ms on the same connection (GetMetricSpec, GetMetrics, IsActive), p50 / p99 / max (goal: p99 within 2× alone, no poll over 1 s)",
			Workload:  load,
			Pelwarden: pmm(l.get(b, "poll-p50-µs-attacked"), l.get(b, "poll-p99-µs-attacked"), l.get(b, "poll-max-µs-attacked")),
			Against:   "the same poll alone, before the broken ScaledObjects, same process",
			Baseline:  ptr(pmm(l.get(b, "poll-p50-µs-quiet"), l.get(b, "poll-p99-µs-quiet"), l.get(b, "poll-max-µs-quiet"))),
		}))
	}
	return rows
}
