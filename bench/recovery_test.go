package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	recoveryKills   = 20
	recoveryHeld    = 20 // entries the killed worker holds
	heartbeatMaxAge = 5  // seconds
)

// BenchmarkRecoveryAfterSIGKILL: a real worker holding K entries is
// SIGKILLed; the time runs until other workers have processed all of them.
// pelwarden runs as its own process with its defaults (refresh every 2 s,
// scan every 10 s plus at once on a new ghost) and heartbeat liveness with
// a 5 s max age.
func BenchmarkRecoveryAfterSIGKILL(b *testing.B) {
	bins := proctest.Build(b, "../cmd/pelwarden", "../test/chaosworker")
	pelwarden, worker := bins[0], bins[1]
	dir := b.TempDir()
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "pelwarden.yaml")
	yml := fmt.Sprintf(`grpc: {addr: "127.0.0.1:0"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
redis:
  - {name: default, addr: %q}
hygiene:
  targets:
    - {stream: jobs, consumerGroup: workers, reclaim: requeue, liveness: heartbeat,
       heartbeatKey: "hb:{consumer}", heartbeatMaxAgeSeconds: "%d", entryStaleSeconds: "1"}
`, srv.Addr(), heartbeatMaxAge)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	pw := proctest.Start(b, "pelwarden", pelwarden, "serve", "--config", cfg)
	defer pw.Term()

	seq := 0
	run := func(name string, args ...string) *proctest.Proc {
		return proctest.Start(b, name, worker, append([]string{"--redis", srv.Addr(), "--stream", "jobs", "--group", "workers", "--consumer", name}, args...)...)
	}
	var lat latencies
	for b.Loop() {
		for round := range recoveryKills {
			seq++
			jobs := make([]string, recoveryHeld)
			pipe := rdb.Pipeline()
			for i := range jobs {
				jobs[i] = strconv.Itoa(seq*1000 + i)
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", jobs[i]}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			victim := run(fmt.Sprintf("victim-%d", seq), "--count", strconv.Itoa(recoveryHeld), "--min-process", "1h", "--max-process", "1h")
			waitFor(b, 10*time.Second, func() bool {
				p, err := rdb.XPending(ctx, "jobs", "workers").Result()
				return err == nil && p.Consumers[fmt.Sprintf("victim-%d", seq)] == recoveryHeld
			})
			helpers := []*proctest.Proc{run(fmt.Sprintf("helper-%d-a", seq)), run(fmt.Sprintf("helper-%d-b", seq))}
			time.Sleep(time.Duration(round%5) * 100 * time.Millisecond) // kills land at different points of the refresh cycle
			victim.Kill()
			killed := time.Now()
			waitFor(b, 60*time.Second, func() bool {
				got, err := rdb.HMGet(ctx, "ledger", jobs...).Result()
				if err != nil {
					return false
				}
				for _, v := range got {
					if v == nil {
						return false
					}
				}
				return true
			})
			lat = append(lat, time.Since(killed))
			for _, h := range helpers {
				h.Term()
			}
		}
	}
	b.StopTimer()
	// Every held entry was processed exactly once.
	counts, err := rdb.HGetAll(ctx, "ledger").Result()
	if err != nil {
		b.Fatal(err)
	}
	if len(counts) != seq*recoveryHeld {
		b.Fatalf("ledger has %d jobs, want %d", len(counts), seq*recoveryHeld)
	}
	for job, n := range counts {
		if n != "1" {
			b.Fatalf("job %s processed %s times", job, n)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2].Seconds(), "p50-s")
	b.ReportMetric(lat[(len(lat)*99)/100].Seconds(), "p99-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
	b.ReportMetric(float64(len(lat)), "kills")
}

func waitFor(b *testing.B, within time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("condition not met within %s", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
