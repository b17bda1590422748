// Command report runs pelwarden's comparative benchmark suite (the
// benchmarks in ./bench, against real redis-server processes), prints one
// markdown table of pelwarden's figures next to what they are compared
// with, and writes every row, with its unit and the command that
// reproduces it, to a JSON file. It exits non-zero if any benchmark fails,
// and a benchmark fails when its own result check does. `make bench` runs
// it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	// pkg is the benchmark package's directory.
	pkg string
	// out is where the JSON results go; empty writes none.
	out string
	// benchtime is -benchtime for the poll and refresh benchmarks.
	benchtime string
	// pel is PELWARDEN_BENCH_PEL for the reclaim comparison.
	pel string
	// kubeBin is the directory with etcd and kube-apiserver; empty leaves
	// out the benchmarks that need a real API server.
	kubeBin string
	// redisNext is a redis-server with XNACK; empty leaves out the release
	// comparison.
	redisNext string
	// costTargets and costIntervals are the sizes of BenchmarkCost.
	costTargets, costIntervals string
	// only, when set, runs the steps whose -bench pattern it matches, and
	// merges their rows into the results file.
	only *regexp.Regexp
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.pkg, "pkg", "./bench", "directory of the benchmark package")
	fs.StringVar(&o.out, "o", "bench/results.json", "JSON results file (empty: none)")
	fs.StringVar(&o.benchtime, "benchtime", "2s", "-benchtime of the poll and refresh benchmarks")
	fs.StringVar(&o.pel, "pel", "200000,1000000", "ghost PEL sizes of the reclaim comparison, comma-separated")
	fs.StringVar(&o.kubeBin, "kube-bin", "", "directory with etcd and kube-apiserver for the API server restart row (empty: the row is left out)")
	fs.StringVar(&o.redisNext, "redis-next", "", "redis-server with XNACK for the release rows (empty: they are left out)")
	fs.StringVar(&o.costTargets, "cost-targets", "1000,10000", "target counts of the Redis cost rows, comma-separated")
	fs.StringVar(&o.costIntervals, "cost-intervals", "30s,5s", "polling intervals of the Redis cost rows, comma-separated")
	only := fs.String("run", "", "run only the steps whose -bench pattern matches this regexp, and merge their rows into the -o file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "report: -run: %v\n", err)
			return 2
		}
		o.only = re
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	res, err := runSuite(ctx, o, stderr)
	rows, missing := rowsAndMissing(res)
	if o.only != nil {
		rows, missing = ranOnly(res, rows, missing)
	}
	var rowErr error
	if len(missing) > 0 {
		rowErr = fmt.Errorf("metrics missing from the run: %s", strings.Join(missing, ", "))
	}
	doc := document{Machine: describeMachine(ctx, started), Rows: rows, Raw: res.raw()}
	doc.Machine.DurationSeconds = time.Since(started).Seconds()
	_, _ = fmt.Fprint(stdout, markdown(rows))
	_, _ = fmt.Fprintf(stdout, "\n%s, %s/%s, %d CPUs, Redis %s, %s; the suite took %s.\n",
		doc.Machine.Date, doc.Machine.GOOS, doc.Machine.GOARCH, doc.Machine.CPUs, doc.Machine.RedisVersion, doc.Machine.GoVersion, time.Since(started).Round(time.Second))
	if o.kubeBin == "" {
		_, _ = fmt.Fprintln(stdout, "The API server restart row needs etcd and kube-apiserver: make bench KUBE_BIN=<directory with both>.")
	}
	if o.redisNext == "" {
		_, _ = fmt.Fprintln(stdout, "The release rows need a redis-server with XNACK: make bench REDIS_NEXT_SERVER=<redis-server>.")
	}
	if err = errors.Join(err, rowErr); err != nil {
		_, _ = fmt.Fprintf(stderr, "report: %v\n", err)
		return 1
	}
	if o.out != "" {
		if o.only != nil {
			if doc, err = mergeInto(o.out, doc, o.only.String()); err != nil {
				_, _ = fmt.Fprintf(stderr, "report: %v\n", err)
				return 1
			}
		}
		if err := writeJSON(o.out, doc); err != nil {
			_, _ = fmt.Fprintf(stderr, "report: %v\n", err)
			return 1
		}
	}
	return 0
}

// document is the JSON file.
type document struct {
	Machine machine `json:"machine"`
	// Partial lists the runs of some steps alone (-run) whose rows
	// replaced those of the full run on Machine.
	Partial []partialRun `json:"partial,omitempty"`
	Rows    []Row        `json:"rows"`
	// Raw is every benchmark's every metric, by name and unit.
	Raw map[string]map[string]float64 `json:"raw"`
}

// partialRun is a run of the steps -run matched.
type partialRun struct {
	Run     string  `json:"run"`
	Machine machine `json:"machine"`
}

// mergeInto returns the document at path with doc's rows and metrics in
// place of those the same commands made before (a row renamed since goes
// with them), and doc's run listed as partial; doc itself when there is
// no document at path.
func mergeInto(path string, doc document, run string) (document, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the -o file the caller named
	if errors.Is(err, os.ErrNotExist) {
		return doc, nil
	}
	if err != nil {
		return doc, err
	}
	var old document
	if err := json.Unmarshal(b, &old); err != nil {
		return doc, fmt.Errorf("%s: %w", path, err)
	}
	ran := map[string]bool{}
	for _, r := range doc.Rows {
		for _, c := range r.Commands {
			ran[c] = true
		}
	}
	var rows []Row
	placed := false
	for _, o := range old.Rows {
		if !slices.ContainsFunc(o.Commands, func(c string) bool { return ran[c] }) {
			rows = append(rows, o)
			continue
		}
		if !placed { // the new rows where the first of theirs was
			rows, placed = append(rows, doc.Rows...), true
		}
	}
	if !placed {
		rows = append(rows, doc.Rows...)
	}
	old.Rows = rows
	if old.Raw == nil {
		old.Raw = map[string]map[string]float64{}
	}
	maps.Copy(old.Raw, doc.Raw)
	old.Partial = append(old.Partial, partialRun{Run: run, Machine: doc.Machine})
	return old, nil
}

// ranOnly keeps, of a run of some steps alone, the rows whose figures it
// measured whole and the missing metrics of the benchmarks it ran.
func ranOnly(res results, rows []Row, missing []string) ([]Row, []string) {
	rows = slices.DeleteFunc(rows, func(r Row) bool {
		vs := slices.Clone(r.Pelwarden.Values)
		if r.Baseline != nil {
			vs = append(vs, r.Baseline.Values...)
		}
		return len(r.Commands) == 0 || slices.ContainsFunc(vs, math.IsNaN)
	})
	missing = slices.DeleteFunc(missing, func(m string) bool {
		name, _, _ := strings.Cut(m, " [")
		_, ran := res[name]
		return !ran
	})
	return rows, missing
}

func writeJSON(path string, doc document) error {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}
