package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func suite(t *testing.T, drop ...string) results {
	t.Helper()
	b, err := os.ReadFile("testdata/suite.txt")
	require.NoError(t, err)
	var kept []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(line, p) }) {
			kept = append(kept, line)
		}
	}
	res := results{}
	require.NoError(t, parse(strings.NewReader(strings.Join(kept, "\n")), "go test ./bench/", res))
	return res
}

func TestParseKeepsTheUnitsTheBenchmarksReport(t *testing.T) {
	t.Parallel()
	res := suite(t)
	poll, ok := res["Poll/pelwarden/consumers=10"]
	require.True(t, ok, "the name loses Benchmark and the GOMAXPROCS suffix; got %v", res.raw())
	require.InDelta(t, 77.0, poll.metrics["p50-µs"], 1e-9)
	require.InDelta(t, 80000.0, poll.metrics["ns/op"], 1e-9, "ns/op must not be tidied to sec/op")
	require.InDelta(t, 15.97, res["Scale/targets=10000"].metrics["heap-MB"], 1e-9, "heap-MB must not be tidied to bytes")
	require.Equal(t, "go test ./bench/", poll.command)
}

func TestBuildRowsPutsRatiosNextToBothFigures(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	first := rows[0]
	require.Equal(t, "10 consumers", first.Workload)
	require.Equal(t, "77 µs / 677 µs", first.Pelwarden.Text)
	require.Equal(t, "60 µs / 115 µs", first.Baseline.Text)
	require.InDeltaSlice(t, []float64{77.0 / 60, 677.0 / 115}, first.Ratio, 1e-9)
	require.Equal(t, []string{"go test ./bench/"}, first.Commands)
}

func TestBuildRowsFindsSizesFromTheNamesInNumericOrder(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var reclaim []string
	for _, r := range rows {
		if strings.HasPrefix(r.What, "give back") {
			reclaim = append(reclaim, r.Workload+" vs "+r.Against)
		}
	}
	require.Len(t, reclaim, 8, "4 comparisons for each of 2 PEL sizes: %v", reclaim)
	require.True(t, strings.HasPrefix(reclaim[0], "200k-entry"), "200k comes before 1M: %v", reclaim)
	require.True(t, strings.HasPrefix(reclaim[4], "1M-entry"), "then 1M: %v", reclaim)
	require.Contains(t, reclaim[3], "over 20k entries", "the naive loop's smaller PEL is said in the row")
}

func TestBuildRowsNamesEveryMissingMetric(t *testing.T) {
	t.Parallel()
	_, err := buildRows(suite(t, "BenchmarkPushActivation", "BenchmarkScalingInflation"))
	require.Error(t, err)
	require.ErrorContains(t, err, "PushActivation [p50-µs]")
	require.ErrorContains(t, err, "ScalingInflation [pelwarden-wasted-replica-s]")
}

func TestParseRejectsAMalformedResultLine(t *testing.T) {
	t.Parallel()
	err := parse(strings.NewReader("BenchmarkPoll-2 \t 10 \t 5\n"), "cmd", results{})
	require.Error(t, err, "a value without its unit is a syntax error, not a silent zero")
}

func TestMarkdownHasOneLinePerRow(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(markdown(rows)), "\n")
	require.Len(t, lines, len(rows)+2, "header, separator, rows")
	for _, l := range lines {
		require.Equal(t, 7, strings.Count(l, "|"), "six cells in %q", l)
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ got, want string }{
		"µs":             {dur(77e-6), "77 µs"},
		"ms":             {dur(0.00085), "850 µs"},
		"ms above 1":     {dur(0.0026), "2.6 ms"},
		"seconds":        {dur(6.7), "6.7 s"},
		"whole seconds":  {dur(140), "140 s"},
		"thousands":      {count(163000), "163k"},
		"thousands frac": {count(13400), "13.4k"},
		"millions":       {count(1_000_000), "1M"},
		"small":          {count(20), "20"},
		"ratio":          {ratioText([]float64{0.654, 20.3}), "0.65x / 20.3x"},
		"no ratio":       {ratioText(nil), "—"},
		"redis version":  {parseRedisVersion("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0"), "7.0.15"},
	}
	for name, c := range cases {
		require.Equal(t, c.want, c.got, name)
	}
}

func TestBuildRowsAddsTheAPIRestartRowOnlyWhenItRan(t *testing.T) {
	t.Parallel()
	what := func(rows []Row) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.What)
		}
		return out
	}
	rows, err := buildRows(suite(t))
	require.NoError(t, err, "without -kube-bin the row is left out, not missing")
	require.NotContains(t, strings.Join(what(rows), "\n"), "API server restart")

	res := suite(t)
	line := "BenchmarkAPIRestartToCurrentVerdicts-2 \t 1 \t 120000000000 ns/op \t 1.1 p50-s \t 2.9 p99-s \t 3.0 max-s \t 0.1 p99-from-readyz-s \t 20 restarts\n"
	require.NoError(t, parse(strings.NewReader(line), "go test -tags kube ./bench/", res))
	rows, err = buildRows(res)
	require.NoError(t, err)
	i := slices.IndexFunc(rows, func(r Row) bool { return strings.HasPrefix(r.What, "API server restart") })
	require.GreaterOrEqual(t, i, 0, "rows: %v", what(rows))
	require.Equal(t, "1.1 s / 2.9 s", rows[i].Pelwarden.Text)
	require.Equal(t, "20 restarts, one pod set, defaults (scaler.freshness 1 s), polled every 10 ms", rows[i].Workload)
	require.Equal(t, []string{"go test -tags kube ./bench/"}, rows[i].Commands)
}

func TestPlanRunsTheAPIRestartBenchmarkOnlyWithItsBinaries(t *testing.T) {
	t.Parallel()
	has := func(o options) bool {
		return slices.ContainsFunc(plan(o), func(s step) bool { return strings.Contains(s.pattern, "APIRestart") })
	}
	require.False(t, has(options{}))
	require.True(t, has(options{kubeBin: "/opt/kube/bin"}))
	for _, s := range plan(options{kubeBin: "/opt/kube/bin"}) {
		if s.kube {
			require.Equal(t, "PELWARDEN_KUBE_BIN=/opt/kube/bin go test -tags kube -run '^$' -bench '^BenchmarkAPIRestartToCurrentVerdicts$' -benchtime 1x -benchmem ./bench/", s.command())
		}
	}
}

func TestBuildRowsSetEachClusterFigureBesideTheSingleNodeOne(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var modes []string
	for _, r := range rows {
		if strings.Contains(r.What, "Redis Cluster") || strings.Contains(r.What, "waitReplicas") {
			require.NotNil(t, r.Baseline, r.What)
			modes = append(modes, r.Workload+": "+r.Pelwarden.Text+" vs "+r.Baseline.Text)
		}
	}
	require.Equal(t, []string{
		"1000 consumers: 526 µs / 700 µs vs 693 µs / 801 µs",
		"1000 consumers: 7.02 ms / 8 ms vs 1.96 ms / 2.3 ms",
		"10000 consumers: 31.4 ms / 35 ms vs 26.6 ms / 29 ms",
		"20k-entry ghost PEL, batches of 1000, median of 3 runs a side, sides alternating: 87.1k entries/s vs 125k entries/s",
		"20k-entry ghost PEL, batches of 1000, median of 3 runs a side, sides alternating: 52.5k entries/s vs 49.7k entries/s",
	}, modes)
}

func TestBuildRowsNameTheMissingClusterRows(t *testing.T) {
	t.Parallel()
	_, err := buildRows(suite(t, "BenchmarkModes/reclaim-2"))
	require.ErrorContains(t, err, "Modes/reclaim [entries/s-cluster]")
}

func TestBuildRowsPutsHygieneNextToTheSameTargetsWithoutIt(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var got []Row
	for _, r := range rows {
		if strings.HasPrefix(r.Workload, "10k groups, 1% with a ghost") {
			got = append(got, r)
		}
	}
	require.Len(t, got, 3, "Redis commands/s, the poll, memory")
	require.InDeltaSlice(t, []float64{17895.0 / 12132}, got[0].Ratio, 1e-9)
	require.InDeltaSlice(t, []float64{327.0 / 323, 10685.0 / 7662}, got[1].Ratio, 1e-9)
	require.Equal(t, "heap in use 60.6 MB, RSS 128 MB, 23 goroutines", got[2].Pelwarden.Text)
}

func TestBuildRowsPutsThePollDuringEachFloodNextToTheQuietOne(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var polls, memory, commands []string
	for _, r := range rows {
		switch {
		case strings.HasPrefix(r.What, "one KEDA poll during the "):
			polls = append(polls, r.Pelwarden.Text+" vs "+r.Baseline.Text)
		case strings.HasPrefix(r.What, "pelwarden process through the "):
			memory = append(memory, r.Pelwarden.Text)
		case strings.HasPrefix(r.What, "Redis commands per producer XADD"):
			commands = append(commands, r.Pelwarden.Text+" vs "+r.Baseline.Text)
		}
	}
	require.Equal(t, []string{
		"821 µs / 6.24 ms vs 266 µs / 1.77 ms",
		"4.83 ms / 50.7 ms vs 290 µs / 4.59 ms",
		"280 µs / 21.3 ms vs 266 µs / 2.44 ms",
		"300 µs / 3 ms vs 266 µs / 2 ms",
		"438 µs / 8.39 ms vs 272 µs / 4.9 ms",
	}, polls, "one row a class, in the benchmark's order")
	require.Equal(t, "peak RSS 332 MB, 31 goroutines; pelwarden used 44% of its CPU (10% quiet), the attacker 98% of its own", memory[0])
	require.Equal(t, "peak RSS 65 MB, 1024 goroutines", memory[2], "a run without the CPU figures")
	require.Equal(t, "30.03 commands vs 0.01 commands", commands[2])
	var perXAdd []string
	for _, r := range rows {
		if strings.HasPrefix(r.What, "StreamIsActive evaluations of a target's answers and streams woken per producer XADD") {
			perXAdd = append(perXAdd, r.Pelwarden.Text)
		}
	}
	require.Equal(t, []string{"3.00 evaluations, 3.95 stream wakes"}, perXAdd, "the stream-is-active class alone reports them")
	for _, r := range rows {
		if strings.Contains(r.What, "new podSelector") {
			require.Equal(t, "120 ms", r.Pelwarden.Text)
			require.Contains(t, r.Workload, "through a real kube-apiserver: 900 calls/s, 90% refused")
			return
		}
	}
	require.Fail(t, "no row of the legitimate selector")
}

func TestBuildRowsLeaveOutTheFloodClassesThatDidNotRun(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t, "BenchmarkFlood/pod-watches"))
	require.NoError(t, err, "without a real API server the pod-watch class is skipped, and its rows with it")
	for _, r := range rows {
		require.NotContains(t, r.What, "pod-watches")
		require.NotContains(t, r.What, "new podSelector")
	}
}

func TestBuildRowsPutsPelwardenNextToTheNoopScalerFloor(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var floor []Row
	for _, r := range rows {
		if strings.Contains(r.Against, "no-op ExternalScaler") {
			floor = append(floor, r)
		}
	}
	require.Len(t, floor, 3, "latency, throughput and allocations")
	require.Equal(t, "371 µs / 2.5 ms", floor[0].Pelwarden.Text)
	require.InDeltaSlice(t, []float64{371.0 / 327, 2499.0 / 2259}, floor[0].Ratio, 1e-9)
	require.InDeltaSlice(t, []float64{0.831}, floor[1].Ratio, 1e-9, "the median of the pairs, not 7662 / 9390")
	require.Contains(t, floor[1].Workload, "8 alternating pairs of rounds, pair ratios 0.76–1.24")
	require.Equal(t, "9.81 KB, 180 allocs", floor[2].Pelwarden.Text)
	require.Equal(t, "10 consumers; both servers in their own process, same client", floor[0].Workload)
	for _, r := range rows {
		if strings.HasPrefix(r.What, "allocated per served poll beyond the floor's") {
			require.Equal(t, fmt.Sprintf("%.2f KB, 14 allocs", (10041.0-9340)/1024), r.Pelwarden.Text)
			return
		}
	}
	require.Fail(t, "no row of pelwarden's own allocation")
}

func TestBuildRowsKeepsTheStatefulSetRecoveryNextToTheReplicaSets(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var pods []string
	for _, r := range rows {
		if strings.Contains(r.What, "pod") && strings.Contains(r.Workload, "Set pods") {
			pods = append(pods, r.Workload+": "+r.Pelwarden.Text)
		}
	}
	require.Equal(t, []string{
		"ReplicaSet pods; 20 kills × 20 entries: 61 ms / 120 ms",
		"ReplicaSet pods; 20 kills × 20 entries: 259 ms / 318 ms",
		"StatefulSet pods; 20 kills × 20 entries: 2.01 s / 2.02 s",
		"StatefulSet pods; 20 kills × 20 entries: 2.259 s / 2.318 s",
		"ReplicaSet pods; 20 deletions × 20 entries: 10 ms / 30 ms",
		"StatefulSet pods; 20 deletions × 20 entries: 2.002 s / 2.005 s",
	}, pods)
}

func TestBuildRowsPutTheServedPollOnKEDAsConnectionNextToItAlone(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var polls []string
	for _, r := range rows {
		if strings.HasPrefix(r.What, "a served trigger ") {
			polls = append(polls, r.Pelwarden.Text+" vs "+r.Baseline.Text)
			require.Regexp(t, `\(1\.01k polls refused/s\); pelwarden used \d\.\d% of its CPU \(0\.\d% alone\), the KEDA side 4\d% of its own$`, r.Workload)
		}
	}
	require.Equal(t, []string{
		"374 µs / 25.7 ms / 64.7 ms vs 634 µs / 11.9 ms / 42.4 ms",
		"312 µs / 16.4 ms / 322 ms vs 697 µs / 12.2 ms / 20.2 ms",
	}, polls, "another namespace, then the same one")
}

func TestReleaseRowsComeOnlyFromARunOnAServerWithXNACK(t *testing.T) {
	t.Parallel()
	has := func(o options) []step {
		var out []step
		for _, s := range plan(o) {
			if strings.Contains(s.pattern, "Release") {
				out = append(out, s)
			}
		}
		return out
	}
	require.Empty(t, has(options{}))
	steps := has(options{redisNext: "/opt/redis/redis-server", pel: "200000"})
	require.Len(t, steps, 1)
	require.Equal(t, "PELWARDEN_BENCH_PEL=200000 PELWARDEN_REDIS_NEXT_SERVER=/opt/redis/redis-server go test -run '^$' -bench '^BenchmarkRelease$' -benchtime 1x -benchmem ./bench/",
		steps[0].command())

	without, err := buildRows(suite(t))
	require.NoError(t, err)
	res := suite(t)
	lines := "BenchmarkRelease/pel=200000/pelwarden-guarded-release-2 \t 1 \t 700000000 ns/op \t 290000 entries/s\n" +
		"BenchmarkRelease/pel=200000/pelwarden-guarded-requeue-2 \t 1 \t 900000000 ns/op \t 220000 entries/s\n" +
		"BenchmarkRelease/pel=200000/xautoclaim-count-1000-2 \t 1 \t 600000000 ns/op \t 330000 entries/s\n"
	require.NoError(t, parse(strings.NewReader(lines), steps[0].command(), res))
	with, err := buildRows(res)
	require.NoError(t, err)
	require.Len(t, with, len(without)+2, "two rows more: release beside requeue and beside XAUTOCLAIM")
	var got []string
	for _, r := range with {
		if strings.Contains(r.What, "guarded release") {
			got = append(got, r.Workload+": "+r.Pelwarden.Text+" vs "+r.Against+" "+r.Baseline.Text)
		}
	}
	require.Equal(t, []string{
		"200k-entry ghost PEL, Redis with XNACK: 290k entries/s vs pelwarden guarded requeue on the same server 220k entries/s",
		"200k-entry ghost PEL, Redis with XNACK: 290k entries/s vs raw `XAUTOCLAIM ... COUNT 1000` loop on the same server 330k entries/s",
	}, got)
}

func TestCostRowsSetEachSizeBesideTheBuiltInScalerLongestIntervalFirst(t *testing.T) {
	t.Parallel()
	rows, err := buildRows(suite(t))
	require.NoError(t, err)
	var cost []Row
	for _, r := range rows {
		if strings.HasPrefix(r.Workload, "1k targets polled every") {
			cost = append(cost, r)
		}
	}
	require.Len(t, cost, 12, "6 rows for each of 2 intervals")
	require.Contains(t, cost[0].Workload, "every 30s", "the longest interval first")
	require.Contains(t, cost[6].Workload, "every 5s")
	require.Equal(t, []float64{0.3}, cost[0].Ratio, "the CPU ratio is the benchmark's, net of the idle Redis on both sides")
	require.Equal(t, "0.060% of a core", cost[0].Pelwarden.Text)
	require.Contains(t, cost[2].What, "goal: at most 1% per 1,000 targets", "the CPU goal is the 30 s one")
	require.NotContains(t, cost[8].What, "goal")
	require.Equal(t, []float64{2}, cost[5].Ratio, "the bytes allocated per poll, beside the no-op's")
	require.Equal(t, "18.0 KiB per poll; 0.1 collections/s", cost[5].Pelwarden.Text)
}

func TestARunOfSomeStepsReplacesTheirRowsAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	all, err := buildRows(suite(t))
	require.NoError(t, err)
	// Some figures of the suite divide by a quiet zero, which JSON cannot hold.
	all = slices.DeleteFunc(all, func(r Row) bool {
		return slices.ContainsFunc(r.Ratio, func(x float64) bool { return math.IsInf(x, 0) })
	})
	isCost := func(r Row) bool { return strings.Contains(r.Workload, "polled every") }
	for i := range all {
		if isCost(all[i]) {
			all[i].Commands = []string{"cost"}
		}
	}
	renamed := Row{What: "an old name of a cost row", Commands: []string{"cost"}}
	stored := append(slices.Clone(all), renamed)
	path := t.TempDir() + "/results.json"
	require.NoError(t, writeJSON(path, document{Machine: machine{Date: "full"}, Rows: stored, Raw: suite(t).raw()}))

	res := suite(t)
	for name := range res {
		if !strings.HasPrefix(name, "Cost/") {
			delete(res, name)
		}
	}
	ran, missing := rowsAndMissing(res)
	rows, missing := ranOnly(res, ran, missing)
	require.Empty(t, missing, "only the benchmarks run count as missing")
	require.Len(t, rows, 12)
	for i := range rows {
		rows[i].Commands = []string{"cost"}
	}
	rows[0].Pelwarden.Text = "changed"
	doc, err := mergeInto(path, document{Machine: machine{Date: "partial"}, Rows: rows, Raw: res.raw()}, "Cost")
	require.NoError(t, err)
	require.Len(t, doc.Rows, len(all), "the run's rows replace those its commands made, the renamed one too")
	require.NotContains(t, doc.Rows, renamed)
	require.Equal(t, "full", doc.Machine.Date)
	require.Equal(t, []partialRun{{Run: "Cost", Machine: machine{Date: "partial"}}}, doc.Partial)
	i := slices.IndexFunc(doc.Rows, func(r Row) bool { return r.Pelwarden.Text == "changed" })
	require.Equal(t, slices.IndexFunc(all, isCost), i, "in the place of the first row they replace")
	require.Equal(t, all[:i], doc.Rows[:i], "the rows of other commands stay")
}
