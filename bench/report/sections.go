package main

import (
	"fmt"
	"strconv"
	"strings"
)

// podOwners are the controllers of the pod-watch recovery benchmarks'
// pods: a Deployment's ReplicaSet (no grace) and a StatefulSet (the grace).
var podOwners = []string{"ReplicaSet", "StatefulSet"}

func recoveryRows(l *lookup) []Row {
	const what = "recovery after SIGKILL of a real worker until others processed all its entries, "
	n := "RecoveryAfterSIGKILL/liveness=heartbeat"
	rows := []Row{l.row(Row{
		What:      what + "heartbeat liveness, pelwarden as its own process, p50 / p99",
		Workload:  fmt.Sprintf("%.0f kills × %.0f entries", l.get(n, "kills"), l.get(n, "entries-per-kill")),
		Pelwarden: seconds(l.get(n, "p50-s"), l.get(n, "p99-s")),
	})}
	for _, owner := range podOwners {
		n := "RecoveryAfterSIGKILL/liveness=kubernetes/owner=" + owner
		load := fmt.Sprintf("%s pods; %.0f kills × %.0f entries", owner, l.get(n, "kills"), l.get(n, "entries-per-kill"))
		pod := "pod-watch liveness (fake clientset), pod deleted at the kill, "
		rows = append(rows,
			l.row(Row{What: "recovery: " + pod + "to the first of its entries requeued, p50 / p99", Workload: load,
				Pelwarden: seconds(l.get(n, "first-p50-s"), l.get(n, "first-p99-s"))}),
			l.row(Row{What: what + pod + "p50 / p99", Workload: load, Pelwarden: seconds(l.get(n, "p50-s"), l.get(n, "p99-s"))}))
	}
	for _, owner := range podOwners {
		n := "PodDeletionToRequeue/owner=" + owner
		rows = append(rows, l.row(Row{
			What:      "pod deleted to the first of its consumer's entries requeued, p50 / p99",
			Workload:  fmt.Sprintf("%s pods; %.0f deletions × %.0f entries", owner, l.get(n, "deletions"), l.get(n, "entries-per-pod")),
			Pelwarden: seconds(l.get(n, "p50-s"), l.get(n, "p99-s")),
		}))
	}
	return rows
}

// apiRestart is the benchmark that needs a real API server.
const apiRestart = "APIRestartToCurrentVerdicts"

func apiRestartRow(l *lookup) Row {
	return l.row(Row{
		What:      "API server restart (SIGKILL, real kube-apiserver) to verdicts judged by pods again, from the server's first answer, p50 / p99",
		Workload:  fmt.Sprintf("%.0f restarts, one pod set, defaults (scaler.freshness 1 s), polled every 10 ms", l.get(apiRestart, "restarts")),
		Pelwarden: seconds(l.get(apiRestart, "p50-s"), l.get(apiRestart, "p99-s")),
	})
}

func inflationRows(l *lookup) []Row {
	n := "ScalingInflation"
	load := fmt.Sprintf("%.0f s scripted, %.0f workers die, ghosts end holding %.0f entries; target %.0f/replica; the live work needs %.0f replica-s",
		l.get(n, "simulated-s"), l.get(n, "deaths"), l.get(n, "ghost-entries"), l.get(n, "target"), l.get(n, "needed-replica-s"))
	against := "the all-consumers XPENDING count (KEDA's redis-streams scaler), same HPA rule"
	fig := func(unit string) *Figure { return ptr(plain(l.get(n, unit), "replica-s")) }
	return []Row{
		l.row(Row{What: "scaling inflation: replica-seconds the HPA asked for", Workload: load,
			Pelwarden: *fig("pelwarden-replica-s"), Against: against, Baseline: fig("xpending-replica-s")}),
		l.row(Row{What: "scaling inflation: replica-seconds wasted (asked beyond the live work's need)", Workload: load,
			Pelwarden: *fig("pelwarden-wasted-replica-s"), Against: against, Baseline: fig("xpending-wasted-replica-s")}),
	}
}

func scaleRows(l *lookup) []Row {
	var rows []Row
	for _, n := range sizes(l.res, "Scale/targets=") {
		b := "Scale/targets=" + n
		f := seconds(l.get(b, "cycle-s"))
		f.Text += memText(l, b, "")
		rows = append(rows, l.row(Row{What: "every target read once through one liveness view, batched by connection; heap held, process RSS", Workload: count(float64(atoi(n))) + " targets", Pelwarden: f}))
	}
	for _, n := range sizes(l.res, "Scale/consumers=") {
		b := "Scale/consumers=" + n
		f := millis(l.get(b, "p50-ms"), l.get(b, "p99-ms"))
		f.Text += memText(l, b, "")
		rows = append(rows, l.row(Row{What: "refresh of one group, p50 / p99; heap held, process RSS", Workload: count(float64(atoi(n))) + " consumers", Pelwarden: f}))
	}
	return append(rows, pelMemRows(l)...)
}

// pelMemRows compare the largest PEL of BenchmarkMemoryVsPEL with the
// smallest, over the same consumers.
func pelMemRows(l *lookup) []Row {
	const b = "MemoryVsPEL"
	var pels []int
	for unit := range l.res[b].metrics {
		if s, ok := strings.CutPrefix(unit, "heap-MB-pel"); ok {
			pels = append(pels, atoi(s))
		}
	}
	if len(pels) < 2 {
		l.missing = append(l.missing, b+" [heap-MB-pel<N> for two sizes]")
		return nil
	}
	small, large := strconv.Itoa(min(pels[0], pels[1])), strconv.Itoa(max(pels[0], pels[1]))
	heapRSS := func(sfx string) Figure {
		return Figure{Labels: []string{"heap", "rss"}, Values: []float64{l.get(b, "heap-MB-pel"+sfx), l.get(b, "rss-MB-pel"+sfx)}, Unit: "MB",
			Text: fmt.Sprintf("heap %.2f MB, RSS %.0f MB", l.get(b, "heap-MB-pel"+sfx), l.get(b, "rss-MB-pel"+sfx))}
	}
	timing := func(sfx string) Figure {
		return Figure{Labels: []string{"refresh", "scan"}, Values: []float64{l.get(b, "refresh-ms-pel"+sfx) / 1000, l.get(b, "scan-s-pel"+sfx)}, Unit: "s",
			Text: fmt.Sprintf("refresh %s, dry-run scan of every entry %s", dur(l.get(b, "refresh-ms-pel"+sfx)/1000), dur(l.get(b, "scan-s-pel"+sfx)))}
	}
	load := fmt.Sprintf("1000 ghost consumers, %s-entry PEL", count(float64(atoi(large))))
	against := fmt.Sprintf("the same consumers with a %s-entry PEL", count(float64(atoi(small))))
	return []Row{
		l.row(Row{What: "memory after a refresh and a full hygiene scan (must not grow with the PEL: fails past ±10%)", Workload: load,
			Pelwarden: heapRSS(large), Against: against, Baseline: ptr(heapRSS(small))}),
		l.row(Row{What: "refresh and dry-run hygiene scan time", Workload: load,
			Pelwarden: timing(large), Against: against, Baseline: ptr(timing(small))}),
	}
}

func memText(l *lookup, name, sfx string) string {
	return fmt.Sprintf("; heap %.1f MB, RSS %.0f MB", l.get(name, "heap-MB"+sfx), l.get(name, "rss-MB"+sfx))
}
