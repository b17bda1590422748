package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Row is one line of the table: pelwarden's figure, and where there is
// one, the figure it is compared with, measured in the same run.
type Row struct {
	What      string  `json:"what"`
	Workload  string  `json:"workload"`
	Pelwarden Figure  `json:"pelwarden"`
	Against   string  `json:"compared_with,omitempty"`
	Baseline  *Figure `json:"baseline,omitempty"`
	// Ratio is pelwarden's figure divided by the baseline's, value by
	// value (p50 by p50, p99 by p99).
	Ratio    []float64 `json:"ratio,omitempty"`
	Commands []string  `json:"commands"`
}

// Figure is one or more values in one unit, such as a p50 and a p99.
type Figure struct {
	Labels []string  `json:"labels"`
	Values []float64 `json:"values"`
	Unit   string    `json:"unit"`
	Text   string    `json:"text"`
}

// lookup reads metrics from results and remembers what was missing and
// which commands the values came from.
type lookup struct {
	res      results
	missing  []string
	commands map[string]bool
}

func (l *lookup) get(name, unit string) float64 {
	r, ok := l.res[name]
	v, found := r.metrics[unit]
	if !ok || !found {
		l.missing = append(l.missing, name+" ["+unit+"]")
		return math.NaN()
	}
	l.commands[r.command] = true
	return v
}

// row finishes a row with the commands its values came from.
func (l *lookup) row(r Row) Row {
	r.Commands = slices.Sorted(maps.Keys(l.commands))
	clear(l.commands)
	if r.Baseline != nil && len(r.Baseline.Values) == len(r.Pelwarden.Values) {
		for i, v := range r.Pelwarden.Values {
			r.Ratio = append(r.Ratio, v/r.Baseline.Values[i])
		}
	}
	return r
}

// buildRows turns results into the table's rows. Sizes (consumer counts,
// PEL sizes) come from the benchmark names found, not from a list here.
// It returns an error naming every metric a row needs and did not find.
func buildRows(res results) ([]Row, error) {
	rows, missing := rowsAndMissing(res)
	if len(missing) > 0 {
		return rows, fmt.Errorf("metrics missing from the run: %s", strings.Join(missing, ", "))
	}
	return rows, nil
}

// rowsAndMissing is buildRows with the metrics not found, each as
// "name [unit]".
func rowsAndMissing(res results) ([]Row, []string) {
	l := &lookup{res: res, commands: map[string]bool{}}
	var rows []Row
	for _, n := range sizes(res, "Poll/pelwarden/consumers=") {
		rows = append(rows, pollRows(l, n)...)
	}
	rows = append(rows, floorRows(l)...)
	for _, n := range sizes(res, "Refresh/consumers=") {
		p := "Refresh/consumers=" + n
		rows = append(rows, l.row(Row{What: "one read of a target (pipelined read + judging), p50 / p99", Workload: n + " consumers",
			Pelwarden: latency(l.get(p, "p50-µs"), l.get(p, "p99-µs"))}))
	}
	rows = append(rows, l.row(Row{What: "push activation: first XADD on an idle stream to StreamIsActive true, p50 / p99", Workload: "one stream",
		Pelwarden: latency(l.get("PushActivation", "p50-µs"), l.get("PushActivation", "p99-µs"))}))
	for _, n := range sizes(res, "Reclaim/pel=") {
		rows = append(rows, reclaimRows(l, n)...)
	}
	for _, n := range sizes(res, releasePrefix) { // run only with a server with XNACK (-redis-next)
		rows = append(rows, releaseRows(l, n)...)
	}
	rows = append(rows, recoveryRows(l)...)
	rows = append(rows, deadlineRows(l)...)
	if _, ok := res[apiRestart]; ok { // run only with etcd and kube-apiserver (-kube-bin)
		rows = append(rows, apiRestartRow(l))
	}
	rows = append(rows, inflationRows(l)...)
	rows = append(rows, scaleRows(l)...)
	rows = append(rows, modeRows(l)...)
	rows = append(rows, hygieneRows(l)...)
	rows = append(rows, costRows(l)...)
	rows = append(rows, floodRows(l)...)
	rows = append(rows, sharedConnRows(l)...)
	return rows, l.missing
}

// sizes lists, in numeric order, the N of every result named prefix+N or
// prefix+N/...
func sizes(res results, prefix string) []string {
	seen := map[string]bool{}
	for name := range res {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			n, _, _ := strings.Cut(rest, "/")
			seen[n] = true
		}
	}
	out := slices.Collect(maps.Keys(seen))
	sort.Slice(out, func(i, j int) bool { return atoi(out[i]) < atoi(out[j]) })
	return out
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return math.MaxInt
	}
	return n
}

func pollRows(l *lookup, n string) []Row {
	pw, kd := "Poll/pelwarden/consumers="+n, "Poll/keda-xpending-summary/consumers="+n
	ppw, pkd := "PollParallel/pelwarden/consumers="+n, "PollParallel/keda-xpending-summary/consumers="+n
	xpending := "the XPENDING summary KEDA's redis-streams scaler sends per poll"
	return []Row{
		l.row(Row{What: "one KEDA poll (GetMetrics + IsActive, KEDA's client), p50 / p99", Workload: n + " consumers",
			Pelwarden: latency(l.get(pw, "p50-µs"), l.get(pw, "p99-µs")),
			Against:   xpending, Baseline: ptr(latency(l.get(kd, "p50-µs"), l.get(kd, "p99-µs")))}),
		l.row(Row{What: "poll throughput, 4 callers per CPU", Workload: n + " consumers",
			Pelwarden: rate(l.get(ppw, "polls/s"), "polls/s"),
			Against:   xpending + ", same callers", Baseline: ptr(rate(l.get(pkd, "polls/s"), "polls/s"))}),
	}
}

func reclaimRows(l *lookup, n string) []Row {
	pre := "Reclaim/pel=" + n + "/"
	requeue := func() Figure { return rate(l.get(pre+"pelwarden-guarded-requeue", "entries/s"), "entries/s") }
	load := fmt.Sprintf("%s-entry ghost PEL", count(float64(atoi(n))))
	rows := []Row{
		l.row(Row{What: "give back a ghost's PEL: pelwarden guarded requeue (XADD copy + XACK, checked per entry)", Workload: load,
			Pelwarden: requeue(), Against: "raw `XAUTOCLAIM ... COUNT 1000` loop (moves, checks nothing)",
			Baseline: ptr(rate(l.get(pre+"xautoclaim-count-1000", "entries/s"), "entries/s"))}),
		l.row(Row{What: "give back a ghost's PEL: pelwarden guarded requeue", Workload: load,
			Pelwarden: requeue(), Against: "raw `XAUTOCLAIM ... COUNT 1000 JUSTID` loop",
			Baseline: ptr(rate(l.get(pre+"xautoclaim-count-1000-justid", "entries/s"), "entries/s"))}),
		l.row(Row{What: "give back a ghost's PEL: pelwarden guarded claim (XCLAIM to a live consumer)", Workload: load,
			Pelwarden: rate(l.get(pre+"pelwarden-guarded-claim", "entries/s"), "entries/s"),
			Against:   "raw `XAUTOCLAIM ... COUNT 1000` loop",
			Baseline:  ptr(rate(l.get(pre+"xautoclaim-count-1000", "entries/s"), "entries/s"))}),
	}
	for _, m := range sizes(l.res, "Reclaim/naive-xpending-xclaim-per-entry/pel=") {
		rows = append(rows, l.row(Row{What: "give back a ghost's PEL: pelwarden guarded requeue", Workload: load,
			Pelwarden: requeue(), Against: fmt.Sprintf("naive per-entry `XPENDING` + `XCLAIM` loop (run over %s entries; its rate)", count(float64(atoi(m)))),
			Baseline: ptr(rate(l.get("Reclaim/naive-xpending-xclaim-per-entry/pel="+m, "entries/s"), "entries/s"))}))
	}
	return rows
}
