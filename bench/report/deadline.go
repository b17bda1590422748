package main

import "fmt"

// deadlineKinds are BenchmarkDeadlineToRequeue's thresholds, each with
// what its instant is and the workload's words.
var deadlineKinds = []struct{ kind, what, load string }{
	{"heartbeat", "heartbeat liveness: last heartbeat + max age to the first of its entries requeued, p50 / p99", "max age 2 s"},
	{"idle", "idle-only liveness: consumer crosses ghostIdle to the first of its entries requeued, p50 / p99", "ghostIdle 5 s"},
	{"stale", "seed 000's case: an entry turns stale under a silent owner (heartbeat an hour old) to requeued, p50 / p99", "entryStale 5 s"},
}

// deadlineRows are the times from the instant a threshold lets pelwarden
// act until it does, on its defaults (scan 10 s), once a poll has read
// the consumer.
func deadlineRows(l *lookup) []Row {
	rows := make([]Row, 0, len(deadlineKinds))
	for _, k := range deadlineKinds {
		n := "DeadlineToRequeue/kind=" + k.kind
		rows = append(rows, l.row(Row{
			What:      k.what,
			Workload:  fmt.Sprintf("%.0f rounds; %s; defaults (scan 10 s); one poll a second after the consumer read", l.get(n, "rounds"), k.load),
			Pelwarden: seconds(l.get(n, "p50-s"), l.get(n, "p99-s")),
		}))
	}
	return rows
}
