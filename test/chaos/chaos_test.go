// Package chaos runs pelwarden and real worker processes against a real
// redis-server, kills things at random, and checks the books at the end.
package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// size is one run's scale. CI runs the bounded size; `make chaos` sets
// PELWARDEN_CHAOS=full.
type size struct {
	entries, workers, poisonEvery, hoard int
	produceFor, settle                   time.Duration
}

func chaosSize() size {
	if os.Getenv("PELWARDEN_CHAOS") == "full" {
		return size{entries: 30000, workers: 8, poisonEvery: 100, hoard: 10000, produceFor: 40 * time.Second, settle: 4 * time.Minute}
	}
	return size{entries: 3000, workers: 4, poisonEvery: 50, hoard: 1500, produceFor: 10 * time.Second, settle: 90 * time.Second}
}

const (
	stream, group, dlq, ledger = "jobs", "workers", "jobs:dead", "ledger"
	leaseKey                   = "pelwarden:lease:4:jobs:workers"
)

func pelwardenConfig(t *testing.T, redisAddr, identity string) string {
	t.Helper()
	cfg := fmt.Sprintf(`grpc:
  addr: %s
http:
  addr: %s
log:
  level: info
  format: text
scaler:
  refreshInterval: 200ms
  maxSnapshotAge: 500ms
redis:
  - name: default
    addr: %s
    dialTimeout: 300ms
    readTimeout: 1s
    writeTimeout: 1s
hygiene:
  scanInterval: 300ms
  leaseTTL: 2s
  batchSize: 50
  identity: %s
  targets:
    - stream: %s
      consumerGroup: %s
      reclaim: requeue
      liveness: heartbeat
      heartbeatKey: "hb:{consumer}"
      heartbeatMaxAgeSeconds: "1"
      entryStaleSeconds: "0.5"
      hardTimeoutSeconds: "4"
      maxDeliveries: "%d"
      deadLetterStream: %s
`, freePort(t), freePort(t), redisAddr, identity, stream, group, maxDeliveries, dlq)
	path := filepath.Join(t.TempDir(), identity+".yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// maxDeliveries is the hygiene target's delivery limit.
const maxDeliveries = 3

// fleet is the running processes of one chaos run.
type fleet struct {
	t         *testing.T
	bin, wbin string
	redisAddr string

	mu        sync.Mutex
	workers   []*proctest.Proc
	pelwarden map[string]*proctest.Proc
	configs   map[string]string
	seq       int
}

func (f *fleet) startWorker() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	name := fmt.Sprintf("worker-%d", f.seq)
	f.workers = append(f.workers, proctest.Start(f.t, name, f.wbin,
		"--redis", f.redisAddr, "--stream", stream, "--group", group, "--consumer", name,
		"--poison-every", strconv.Itoa(chaosSize().poisonEvery), "--ledger", ledger))
}

// killRandomWorker SIGKILLs one worker and starts a replacement under a new
// name, as a Deployment would.
func (f *fleet) killRandomWorker() {
	f.mu.Lock()
	i := rand.IntN(len(f.workers))
	victim := f.workers[i]
	f.workers = append(f.workers[:i], f.workers[i+1:]...)
	f.mu.Unlock()
	victim.Kill()
	f.startWorker()
}

func (f *fleet) startPelwarden(identity string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.configs[identity] == "" {
		f.configs[identity] = pelwardenConfig(f.t, f.redisAddr, identity)
	}
	f.pelwarden[identity] = proctest.Start(f.t, "pelwarden-"+identity, f.bin, "serve", "--config", f.configs[identity])
}

func (f *fleet) pelwardenProc(identity string) *proctest.Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pelwarden[identity]
}

func (f *fleet) logs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := ""
	for _, p := range f.pelwarden {
		out += p.Tail(30) + "\n"
	}
	return out
}

// TestChaosBooksBalance: workers are SIGKILLed at random, Redis restarts
// once (AOF), pelwarden is SIGKILLed in the middle of a large requeue and
// started again, and two replicas run together for part of the run. At the
// end every entry is processed exactly once or dead-lettered, the
// dead-letter stream holds every poison entry, and anything else in it
// reached maxDeliveries.
func TestChaosBooksBalance(t *testing.T) {
	sz := chaosSize()
	bins := proctest.Build(t, "../../cmd/pelwarden", "../chaosworker")
	bin, wbin := bins[0], bins[1]
	srv := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--appendfsync", "always"}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 20, MinRetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, stream, group)

	f := &fleet{t: t, bin: bin, wbin: wbin, redisAddr: srv.Addr(), pelwarden: map[string]*proctest.Proc{}, configs: map[string]string{}}
	f.startPelwarden("a")
	for range sz.workers {
		f.startWorker()
	}

	produced := make(chan struct{})
	go func() { // the producer: unique job ids at a steady rate
		defer close(produced)
		every := sz.produceFor / time.Duration(sz.entries/10)
		for i := 0; i < sz.entries; i += 10 {
			pipe := rdb.Pipeline()
			for j := i; j < i+10 && j < sz.entries; j++ {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", strconv.Itoa(j)}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			time.Sleep(every)
		}
	}()

	stopKilling := make(chan struct{})
	killed := make(chan int)
	go func() { // the chaos monkey
		n := 0
		defer func() { killed <- n }()
		for {
			select {
			case <-stopKilling:
				return
			case <-time.After(time.Duration(600+rand.IntN(900)) * time.Millisecond):
				f.killRandomWorker()
				n++
			}
		}
	}()

	time.Sleep(sz.produceFor / 5)
	f.startPelwarden("b") // two replicas from here on, for a while
	time.Sleep(sz.produceFor / 10)
	killedMidBatch := killLeaderMidRequeue(t, f, rdb, sz.hoard)
	time.Sleep(sz.produceFor / 10)
	t.Log("restarting redis")
	srv.Stop()
	srv.Restart(t)
	time.Sleep(sz.produceFor / 10)
	f.pelwardenProc("b").Term() // back to one replica

	<-produced
	close(stopKilling)
	kills := <-killed
	t.Logf("produced %d entries; SIGKILLed %d workers; pelwarden killed mid-batch: %v", sz.entries, kills, killedMidBatch)
	require.True(t, killedMidBatch, "pelwarden was SIGKILLed while a large requeue was under way")

	waitForBooks(t, f, rdb, sz)
	checkBooks(t, rdb, sz)
}

// killLeaderMidRequeue makes a hoarder consumer read a large batch and go
// silent, waits until the lease holder has requeued part of it, SIGKILLs
// that pelwarden, and starts it again.
// hoardJob numbers hoarded jobs after the produced ones, never poison.
func hoardJob(i int) int {
	sz := chaosSize()
	return (sz.entries/sz.poisonEvery+1+i)*sz.poisonEvery + 1
}

func killLeaderMidRequeue(t *testing.T, f *fleet, rdb *redis.Client, hoard int) bool {
	t.Helper()
	ctx := context.Background()
	addJobs := rdb.Pipeline()
	for i := range hoard {
		addJobs.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", strconv.Itoa(hoardJob(i))}})
	}
	_, err := addJobs.Exec(ctx)
	require.NoError(t, err)
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "hoarder", Streams: []string{stream, ">"}, Count: int64(hoard), Block: -1}).Result()
	require.NoError(t, err)
	held := len(res[0].Messages)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p, err := rdb.XPending(ctx, stream, group).Result()
		if err != nil {
			continue
		}
		left := p.Consumers["hoarder"]
		if left > 0 && left < int64(held) {
			leader, err := rdb.Get(ctx, leaseKey).Result()
			if err != nil {
				continue
			}
			f.pelwardenProc(leader).Kill()
			t.Logf("SIGKILLed pelwarden %s with %d of %d hoarded entries still pending", leader, left, held)
			time.Sleep(300 * time.Millisecond)
			f.startPelwarden(leader)
			return true
		}
		if left == 0 && p.Consumers != nil {
			if _, still := p.Consumers["hoarder"]; !still && time.Since(deadline.Add(-30*time.Second)) > 2*time.Second {
				return false // the whole batch went before the kill could land
			}
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// waitForBooks waits until every job is acknowledged or dead-lettered and
// nothing is pending.
func waitForBooks(t *testing.T, f *fleet, rdb *redis.Client, sz size) {
	t.Helper()
	ctx := context.Background()
	want := int64(sz.entries + sz.hoard)
	deadline := time.Now().Add(sz.settle)
	var done, dead, pending int64
	for time.Now().Before(deadline) {
		done, _ = rdb.HLen(ctx, ledger).Result()
		dead, _ = rdb.XLen(ctx, dlq).Result()
		p, err := rdb.XPending(ctx, stream, group).Result()
		if err == nil {
			pending = p.Count
		}
		if done+dead >= want && pending == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("books did not settle within %s: %d processed + %d dead-lettered of %d, %d pending\n%s",
		sz.settle, done, dead, want, pending, f.logs())
}

func checkBooks(t *testing.T, rdb *redis.Client, sz size) {
	t.Helper()
	ctx := context.Background()
	counts, err := rdb.HGetAll(ctx, ledger).Result()
	require.NoError(t, err)
	deadRecords, err := rdb.XRange(ctx, dlq, "-", "+").Result()
	require.NoError(t, err)
	dead := map[string]int{}
	var deadTooSoon []string
	for _, r := range deadRecords {
		job := r.Values["job"].(string)
		dead[job]++
		// Only the delivery limit sends an entry to the dead-letter stream.
		if n, _ := strconv.Atoi(fmt.Sprint(r.Values["pelwarden-deliveries"])); n < maxDeliveries {
			deadTooSoon = append(deadTooSoon, fmt.Sprintf("%s (%v deliveries)", job, r.Values["pelwarden-deliveries"]))
		}
	}

	// The producer retries through the Redis restart, and a retried
	// pipeline can add an entry twice: count the originals (entries without
	// pelwarden's delivery-count field) so each entry, not each job number,
	// must be processed once.
	originals := map[string]int{}
	for start := "-"; ; {
		page, err := rdb.XRangeN(ctx, stream, start, "+", 5000).Result()
		require.NoError(t, err)
		for _, e := range page {
			if _, isCopy := e.Values["pelwarden-deliveries"]; !isCopy {
				originals[e.Values["job"].(string)]++
			}
		}
		if len(page) < 5000 {
			break
		}
		start = "(" + page[len(page)-1].ID
	}

	var lost, twice, wrongDead, slowDead []string
	check := func(job string, poison bool) {
		n, _ := strconv.Atoi(counts[job])
		entries := originals[job]
		switch {
		case entries == 0:
			lost = append(lost, job+" (never in the stream)")
		case poison && (dead[job] != entries || n != 0):
			wrongDead = append(wrongDead, fmt.Sprintf("%s (processed %d, dead-lettered %d, entries %d)", job, n, dead[job], entries))
		case !poison && n > entries:
			twice = append(twice, fmt.Sprintf("%s (%d times, %d entries)", job, n, entries))
		case !poison && n+dead[job] < entries:
			lost = append(lost, fmt.Sprintf("%s (processed %d of %d entries, dead-lettered %d)", job, n, entries, dead[job]))
		case !poison && dead[job] > 0:
			// A good entry can reach maxDeliveries too: held by workers
			// that were killed, or taken past hardTimeoutSeconds from a
			// worker slowed by a loaded machine. It is not lost: it is in
			// the dead-letter stream with its count.
			slowDead = append(slowDead, job)
		}
	}
	poisonCount := 0
	for i := range sz.entries {
		poison := i%sz.poisonEvery == 0
		if poison {
			poisonCount++
		}
		check(strconv.Itoa(i), poison)
	}
	for i := range sz.hoard {
		check(strconv.Itoa(hoardJob(i)), false)
	}
	for job := range counts {
		if _, err := strconv.Atoi(job); err != nil {
			t.Errorf("ledger has an entry without a job id: %s", job)
		}
	}
	require.Empty(t, lost, "entries neither processed nor dead-lettered")
	require.Empty(t, twice, "entries processed twice although no worker died holding them after processing")
	require.Empty(t, wrongDead, "poison entries not dead-lettered exactly once")
	require.Empty(t, deadTooSoon, "entries dead-lettered before maxDeliveries")
	require.Len(t, dead, poisonCount+len(slowDead), "the dead-letter stream holds the poison entries and good ones that reached maxDeliveries")
	if len(slowDead) > 0 {
		t.Logf("good entries that reached maxDeliveries and were dead-lettered: %v", slowDead)
	}
	poisonEntries := 0
	for job := range dead {
		poisonEntries += originals[job]
	}
	require.Len(t, deadRecords, poisonEntries, "one dead-letter record per poison entry")
	p, err := rdb.XPending(ctx, stream, group).Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, "nothing is left pending")
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
