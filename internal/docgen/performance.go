package docgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BenchResults is where make bench (bench/report) writes its rows.
const BenchResults = "bench/results.json"

// benchRun is the part of bench/results.json the page shows: bench/report
// writes every row whole (what, workload, both figures as text, the
// ratios and the commands that reproduce it), so a row it adds shows here
// as it is, with nothing to change on this side.
type benchRun struct {
	Machine struct {
		Date            string  `json:"date"`
		GOOS            string  `json:"goos"`
		GOARCH          string  `json:"goarch"`
		CPUs            int     `json:"cpus"`
		CPUModel        string  `json:"cpu_model"`
		GoVersion       string  `json:"go_version"`
		RedisVersion    string  `json:"redis_version"`
		DurationSeconds float64 `json:"duration_seconds"`
	} `json:"machine"`
	Rows []benchRow `json:"rows"`
}

type benchRow struct {
	What      string      `json:"what"`
	Workload  string      `json:"workload"`
	Pelwarden benchFigure `json:"pelwarden"`
	Against   string      `json:"compared_with"`
	Baseline  *struct {
		Text string `json:"text"`
	} `json:"baseline"`
	Ratio    []float64 `json:"ratio"`
	Commands []string  `json:"commands"`
}

type benchFigure struct {
	Text string `json:"text"`
}

// Performance is docs/reference/performance.md: every row of the last
// recorded make bench run (bench/results.json), then the HPA suite's last
// recorded run (bench/hpa-loop.json).
func Performance(root string) (Page, error) {
	data, err := os.ReadFile(filepath.Join(root, BenchResults)) //nolint:gosec // G304: the repository's own results
	if err != nil {
		return Page{}, err
	}
	var run benchRun
	if err := json.Unmarshal(data, &run); err != nil {
		return Page{}, fmt.Errorf("%s: %w", BenchResults, err)
	}
	if len(run.Rows) == 0 {
		return Page{}, errors.New(BenchResults + ": a run has rows")
	}
	hpa, err := HPALoop(root)
	if err != nil {
		return Page{}, err
	}
	return page("docs/reference/performance.md", BenchResults+" and "+HPALoopResults, func(b *bytes.Buffer) error {
		b.WriteString("# Performance reference\n\n")
		b.WriteString("The figures of the last recorded runs of `make bench` and `make test-hpa`. " +
			"[Performance](../performance.md) says how to read them.\n\n")
		benchTable(b, run)
		b.WriteString("\n## The HPA on pelwarden's numbers and on KEDA's own\n\n")
		b.WriteString("`make test-hpa HPA_RESULTS=" + HPALoopResults + "` records this run: KEDA's operator and metrics adapter " +
			"and the HPA controller scale one Deployment on pelwarden's trigger and its twin on KEDA's `redis-streams` " +
			"trigger, on the same group.\n")
		b.Write(hpa)
		return nil
	})
}

// benchTable writes the run's rows, each with the numbers of the commands
// that reproduce it, then those commands.
func benchTable(b *bytes.Buffer, run benchRun) {
	m := run.Machine
	cpu := strconv.Itoa(m.CPUs) + " CPUs"
	if m.CPUModel != "" {
		cpu += " (" + m.CPUModel + ")"
	}
	took := (time.Duration(m.DurationSeconds) * time.Second).String()
	fmt.Fprintf(b, "## make bench\n\nThis run: %s, %s/%s, %s, Redis %s, %s; the suite took %s (`%s`). "+
		"The last figure column divides pelwarden's figure by the one it is compared with, value by value (p50 by p50, "+
		"p99 by p99): below 1 is faster or fewer for latencies, memory and replica-seconds, above 1 is more for throughput. "+
		"*run* names the commands below that reproduce the row.\n\n",
		m.Date, m.GOOS, m.GOARCH, cpu, m.RedisVersion, m.GoVersion, took, BenchResults)
	var commands []string
	header(b, "what", "workload", "pelwarden", "compared with", "its figure", "pelwarden ÷ it", "run")
	for _, r := range run.Rows {
		against, base := "—", "—"
		if r.Against != "" {
			against = r.Against
		}
		if r.Baseline != nil {
			base = r.Baseline.Text
		}
		var runs []string
		for _, c := range r.Commands {
			i := slices.Index(commands, c)
			if i < 0 {
				commands = append(commands, c)
				i = len(commands) - 1
			}
			runs = append(runs, strconv.Itoa(i+1))
		}
		row(b, r.What, r.Workload, r.Pelwarden.Text, against, base, ratioText(r.Ratio), strings.Join(runs, ", "))
	}
	b.WriteString("\nThe commands, from the repository root:\n\n")
	for i, c := range commands {
		fmt.Fprintf(b, "%d. `%s`\n", i+1, c)
	}
}

// ratioText writes ratios as bench/report's table does: 0.95x / 3.63x.
func ratioText(r []float64) string {
	if len(r) == 0 {
		return "—"
	}
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = fmt.Sprintf("%.2fx", x)
		if x >= 10 {
			parts[i] = fmt.Sprintf("%.1fx", x)
		}
	}
	return strings.Join(parts, " / ")
}
