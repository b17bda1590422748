package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	dir := b.TempDir()
	pelwarden, worker := filepath.Join(dir, "pelwarden"), filepath.Join(dir, "chaosworker")
	for out, pkg := range map[string]string{pelwarden: "../cmd/pelwarden", worker: "../test/chaosworker"} {
		if out, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
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
	pw := start(b, pelwarden, "serve", "--config", cfg)
	defer stop(pw, syscall.SIGTERM)

	seq := 0
	run := func(name string, args ...string) *exec.Cmd {
		return start(b, worker, append([]string{"--redis", srv.Addr(), "--stream", "jobs", "--group", "workers", "--consumer", name}, args...)...)
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
			helpers := []*exec.Cmd{run(fmt.Sprintf("helper-%d-a", seq)), run(fmt.Sprintf("helper-%d-b", seq))}
			time.Sleep(time.Duration(round%5) * 100 * time.Millisecond) // kills land at different points of the refresh cycle
			stop(victim, syscall.SIGKILL)
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
				stop(h, syscall.SIGTERM)
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

func start(b *testing.B, bin string, args ...string) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd
}

func stop(cmd *exec.Cmd, sig syscall.Signal) {
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
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
