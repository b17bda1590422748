package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// step is one run of the benchmark binary. Steps whose figures include
// memory run in a process of their own, so one does not inherit another's
// heap.
type step struct {
	pattern   string // -bench
	benchtime string
	env       []string
	// kube: the benchmark is built with the kube tag and runs a real API
	// server from the binaries PELWARDEN_KUBE_BIN names.
	kube bool
}

func plan(o options) []step {
	steps := []step{
		{pattern: `^Benchmark(Poll|PollParallel|Refresh)$`, benchtime: o.benchtime},
		{pattern: `^BenchmarkPollFloor$`, benchtime: o.benchtime},
		{pattern: `^BenchmarkPushActivation$`, benchtime: "200x"},
		{pattern: `^BenchmarkReclaim$`, benchtime: "1x", env: []string{"PELWARDEN_BENCH_PEL=" + o.pel}},
		{pattern: `^BenchmarkRecoveryAfterSIGKILL$`, benchtime: "1x"},
		{pattern: `^BenchmarkPodDeletionToRequeue$`, benchtime: "1x"},
		{pattern: `^BenchmarkDeadlineToRequeue$`, benchtime: "1x"},
		{pattern: `^BenchmarkScalingInflation$`, benchtime: "1x"},
		{pattern: `^BenchmarkScale$/^targets=`, benchtime: "3x"},
		{pattern: `^BenchmarkScale$/^consumers=`, benchtime: "20x"},
		{pattern: `^BenchmarkMemoryVsPEL$`, benchtime: "1x"},
		{pattern: `^BenchmarkModes$/^(poll|refresh)/`, benchtime: "50x"},
		{pattern: `^BenchmarkModes$/^reclaim`, benchtime: "1x"},
		{pattern: `^BenchmarkHygieneTargets$`, benchtime: "1x"},
		{pattern: `^BenchmarkCost$`, benchtime: "1x", env: []string{
			"PELWARDEN_BENCH_COST_TARGETS=" + o.costTargets, "PELWARDEN_BENCH_COST_INTERVALS=" + o.costIntervals}},
	}
	// The pod-watch class of the flood runs only with a real API server.
	flood := step{pattern: `^BenchmarkFlood$`, benchtime: "1x"}
	if o.kubeBin != "" {
		flood.env = []string{"PELWARDEN_KUBE_BIN=" + o.kubeBin}
	}
	steps = append(steps, flood, step{pattern: `^BenchmarkSharedConnection$`, benchtime: "1x"})
	if o.kubeBin != "" {
		steps = append(steps, step{pattern: `^BenchmarkAPIRestartToCurrentVerdicts$`, benchtime: "1x",
			env: []string{"PELWARDEN_KUBE_BIN=" + o.kubeBin}, kube: true})
	}
	if o.redisNext != "" {
		steps = append(steps, step{pattern: `^BenchmarkRelease$`, benchtime: "1x",
			env: []string{"PELWARDEN_BENCH_PEL=" + o.pel, "PELWARDEN_REDIS_NEXT_SERVER=" + o.redisNext}})
	}
	if o.only != nil {
		steps = slices.DeleteFunc(steps, func(s step) bool { return !o.only.MatchString(s.pattern) })
	}
	return steps
}

// command is the go test command line that reproduces s.
func (s step) command() string {
	tags := ""
	if s.kube {
		tags = "-tags kube "
	}
	cmd := fmt.Sprintf("go test %s-run '^$' -bench '%s' -benchtime %s -benchmem ./bench/", tags, s.pattern, s.benchtime)
	if len(s.env) > 0 {
		cmd = strings.Join(s.env, " ") + " " + cmd
	}
	return cmd
}

// result is one benchmark's metrics by unit, and the command that ran it.
type result struct {
	metrics map[string]float64
	command string
}

// results are every benchmark's, by name without the Benchmark prefix and
// the GOMAXPROCS suffix, e.g. "Poll/pelwarden/consumers=10".
type results map[string]result

func (r results) raw() map[string]map[string]float64 {
	out := make(map[string]map[string]float64, len(r))
	for name, res := range r {
		out[name] = res.metrics
	}
	return out
}

// runSuite builds the benchmark binary once and runs every step, passing
// its output through to progress. It runs all steps even after a failure,
// so one report shows every failure, and returns them joined.
func runSuite(ctx context.Context, o options, progress io.Writer) (results, error) {
	pkg, err := filepath.Abs(o.pkg)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "pelwarden-bench-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, "bench.test")
	args := []string{"test", "-c", "-o", bin}
	if o.kubeBin != "" {
		// The tag adds the benchmarks that need a real API server.
		args = append(args, "-tags", "kube")
		if o.kubeBin, err = filepath.Abs(o.kubeBin); err != nil {
			return nil, err
		}
	}
	build := exec.CommandContext(ctx, "go", append(args, ".")...) //nolint:gosec // G204: bin is a path in our own temporary directory
	build.Dir, build.Stdout, build.Stderr = pkg, progress, progress
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the benchmarks: %w", err)
	}
	res := results{}
	var errs []error
	for _, s := range plan(o) {
		_, _ = fmt.Fprintf(progress, "\n$ %s\n", s.command())
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", s.pattern, "-test.benchtime", s.benchtime, "-test.benchmem", "-test.timeout", "30m") //nolint:gosec // G204: our own test binary, our own arguments
		// Benchmarks find their sources (proctest.Build) relative to their
		// package directory, as under go test.
		cmd.Dir, cmd.Env = pkg, append(os.Environ(), s.env...)
		cmd.Stdout, cmd.Stderr = io.MultiWriter(progress, &out), progress
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.command(), err))
		}
		if err := parse(&out, s.command(), res); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// parse reads go test benchmark output into res, each result tagged with
// the command that produced it.
func parse(r io.Reader, command string, res results) error {
	br := benchfmt.NewReader(r, command)
	var errs []error
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.Result:
			m := make(map[string]float64, len(rec.Values))
			for _, v := range rec.Values {
				// benchfmt tidies ns/op to sec/op and *MB* to *B*; the
				// table speaks in the units the benchmarks report.
				unit, val := v.Unit, v.Value
				if v.OrigUnit != "" {
					unit, val = v.OrigUnit, v.OrigValue
				}
				m[unit] = val
			}
			res[benchName(rec.Name)] = result{metrics: m, command: command}
		case *benchfmt.SyntaxError:
			errs = append(errs, rec)
		}
	}
	return errors.Join(append(errs, br.Err())...)
}

// benchName drops the Benchmark prefix and the GOMAXPROCS suffix.
func benchName(n benchfmt.Name) string {
	base, parts := n.Parts()
	var b strings.Builder
	b.Write(bytes.TrimPrefix(base, []byte("Benchmark")))
	for _, p := range parts {
		if len(p) > 0 && p[0] == '-' {
			continue
		}
		b.Write(p)
	}
	return b.String()
}
