package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandCalls is every command a server has run, by name as INFO
// commandstats spells it (lower case; a subcommand as "client|unblock"),
// with the number of calls: what a test or benchmark diffs to count the
// Redis commands some work cost.
func CommandCalls(tb testing.TB, c redis.Cmdable) map[string]int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	out := make(map[string]int64)
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, ok := strings.Cut(rest, ":")
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if !ok || err != nil {
			tb.Fatalf("INFO commandstats: cannot read %q", line)
		}
		out[name] = n
	}
	return out
}

// CallsSince is the commands run between two CommandCalls readings, those
// run at least once, and their total. INFO is left out: the readings are
// INFO calls themselves.
func CallsSince(before, after map[string]int64) (by map[string]int64, total int64) {
	by = make(map[string]int64)
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			by[name] = d
			total += d
		}
	}
	return by, total
}
