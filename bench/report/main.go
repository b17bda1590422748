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
	"os"
	"os/signal"
	"path/filepath"
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
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	res, err := runSuite(ctx, o, stderr)
	rows, rowErr := buildRows(res)
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
	Rows    []Row   `json:"rows"`
	// Raw is every benchmark's every metric, by name and unit.
	Raw map[string]map[string]float64 `json:"raw"`
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
