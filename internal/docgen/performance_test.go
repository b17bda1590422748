package docgen

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A row bench/report adds shows on the page as it is written, with the
// command that reproduces it, whatever it measures: the page knows no row.
func TestPerformanceShowsEveryRowTheResultsHold(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := Root(wd)
	require.NoError(t, err)
	hpa, err := os.ReadFile(filepath.Join(root, HPALoopResults))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bench"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, HPALoopResults), hpa, 0o600))
	results := `{"machine": {"date": "2027-01-02T03:04:05Z", "goos": "linux", "goarch": "arm64", "cpus": 4, "go_version": "go1.26.9",
		"redis_version": "8.0.1", "duration_seconds": 61.5},
	 "rows": [
	  {"what": "Redis CPU per poll | a new kind of row", "workload": "1000 ScaledObjects", "pelwarden": {"text": "3.1 µs"},
	   "compared_with": "KEDA's redis-streams scaler", "baseline": {"text": "9.3 µs"}, "ratio": [0.333, 12.5], "commands": ["go test -bench X ./bench/"]},
	  {"what": "a row with nothing to compare", "workload": "one", "pelwarden": {"text": "7 s"}, "commands": ["go test -bench X ./bench/", "go test -bench Y ./bench/"]}
	 ]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, BenchResults), []byte(results), 0o600))
	p, err := Performance(dir)
	require.NoError(t, err)
	page := string(p.Content)
	require.Contains(t, page, "This run: 2027-01-02T03:04:05Z, linux/arm64, 4 CPUs, Redis 8.0.1, go1.26.9; the suite took 1m1s")
	require.Contains(t, page, "| Redis CPU per poll \\| a new kind of row | 1000 ScaledObjects | 3.1 µs | KEDA's redis-streams scaler | 9.3 µs | 0.33x / 12.5x | 1 |\n")
	require.Contains(t, page, "| a row with nothing to compare | one | 7 s | — | — | — | 1, 2 |\n")
	require.Contains(t, page, "1. `go test -bench X ./bench/`\n2. `go test -bench Y ./bench/`\n")
	require.Contains(t, page, "| ghosts |", "the HPA suite's run follows")
}
