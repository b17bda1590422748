// Package chaos runs pelwarden and real worker processes against real
// Redis deployments (one server, a 3-master cluster, a master with a
// replica under 3 sentinels), kills things at random, and checks the books
// at the end.
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
)

// size is one run's scale. CI runs the bounded size; `make chaos` sets
// PELWARDEN_CHAOS=full.
type size struct {
	entries, workers, poisonEvery, hoard int
	produceFor, settle                   time.Duration
}

func full() bool { return os.Getenv("PELWARDEN_CHAOS") == "full" }

func chaosSize() size {
	if full() {
		return size{entries: 30000, workers: 8, poisonEvery: 100, hoard: 10000, produceFor: 40 * time.Second, settle: 4 * time.Minute}
	}
	return size{entries: 3000, workers: 4, poisonEvery: 50, hoard: 1500, produceFor: 10 * time.Second, settle: 90 * time.Second}
}

// multiNodeSize is the scale of the cluster and sentinel runs: smaller in
// CI, whose time goes mostly to starting the nodes and to failovers.
func multiNodeSize() size {
	if full() {
		return chaosSize()
	}
	return size{entries: 1200, workers: 3, poisonEvery: 40, hoard: 600, produceFor: 6 * time.Second, settle: 90 * time.Second}
}

const group = "workers"

// maxDeliveries is the hygiene target's delivery limit.
const maxDeliveries = 3

// keys are the keys of one run. Under Cluster the stream, its ledger and
// pelwarden's lease share the {jobs} slot, as a worker's MULTI needs, and
// the dead-letter stream is in another slot, so the two-step path runs.
type keys struct {
	stream, dlq, ledger string
}

func (k keys) lease() string {
	return fmt.Sprintf("pelwarden:lease:%d:%s:%s", len(k.stream), k.stream, group)
}

// setup is one Redis deployment the suite runs against.
type setup struct {
	keys
	sz size
	// rdb is the suite's own client: the producer's and the books'.
	rdb redis.UniversalClient
	// conn is the pelwarden connection's YAML, under `redis:`.
	conn string
	// worker is the chaos worker's connection flags.
	worker []string
	// failover says a failover that may drop acknowledged writes happens,
	// so a worker may process a delivery the new master never saw.
	failover bool
	// producerWait makes the producer WAIT for a replica: a failover
	// that is not coordinated may drop writes the old master acknowledged.
	producerWait bool
	// disrupt runs the deployment's own failures while the run goes on,
	// and returns once the last of them is done.
	disrupt func(t *testing.T, f *fleet)
}

func pelwardenConfig(t *testing.T, s *setup, identity string) string {
	t.Helper()
	cfg := fmt.Sprintf(`grpc:
  addr: %s
http:
  addr: %s
log:
  level: info
  format: text
scaler:
  freshness: 200ms
redis:
  - name: default
%s    dialTimeout: 300ms
    readTimeout: 1s
    writeTimeout: 1s
hygiene:
  scanInterval: 300ms
  leaseTTL: 2s
  batchSize: 50
  identity: %s
  targets:
    - stream: "%s"
      consumerGroup: %s
      reclaim: requeue
      liveness: heartbeat
      heartbeatKey: "hb:{consumer}"
      heartbeatMaxAgeSeconds: "1"
      entryStaleSeconds: "0.5"
      hardTimeoutSeconds: "4"
      maxDeliveries: "%d"
      deadLetterStream: "%s"
`, freePort(t), freePort(t), s.conn, identity, s.stream, group, maxDeliveries, s.dlq)
	path := filepath.Join(t.TempDir(), identity+".yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// fleet is the running processes of one chaos run.
type fleet struct {
	t         *testing.T
	bin, wbin string
	s         *setup

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
	args := append([]string{"--stream", f.s.stream, "--group", group, "--consumer", name,
		"--poison-every", strconv.Itoa(f.s.sz.poisonEvery), "--ledger", f.s.ledger}, f.s.worker...)
	f.workers = append(f.workers, proctest.Start(f.t, name, f.wbin, args...))
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
		f.configs[identity] = pelwardenConfig(f.t, f.s, identity)
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

// TestChaosBooksBalance runs the suite on each deployment. In every one,
// workers are SIGKILLed at random, two pelwarden replicas run together for
// part of the run, and a large requeue is under way when something
// breaks: on one server pelwarden is SIGKILLed mid-batch and Redis
// restarts (AOF); in a cluster the stream's slot migrates to another
// master mid-requeue and that master fails over; under Sentinel pelwarden
// is SIGKILLed mid-batch and the sentinels fail the master over. At the
// end every entry is processed exactly once or dead-lettered, the
// dead-letter stream holds every poison entry once (across slots in the
// cluster), and anything else in it reached maxDeliveries.
func TestChaosBooksBalance(t *testing.T) {
	bins := proctest.Build(t, "../../cmd/pelwarden", "../chaosworker")
	for name, start := range map[string]func(t *testing.T) *setup{
		"standalone": standalone,
		"cluster":    cluster,
		"sentinel":   sentinel,
	} {
		t.Run(name, func(t *testing.T) { run(t, bins[0], bins[1], start(t)) })
	}
}

func run(t *testing.T, bin, wbin string, s *setup) {
	sz := s.sz
	f := &fleet{t: t, bin: bin, wbin: wbin, s: s, pelwarden: map[string]*proctest.Proc{}, configs: map[string]string{}}
	f.startPelwarden("a")
	for range sz.workers {
		f.startWorker()
	}
	produced := make(chan struct{})
	go func() { // the producer: unique job ids at a steady rate
		defer close(produced)
		produce(t, s)
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
	s.disrupt(t, f)
	f.pelwardenProc("b").Term() // back to one replica

	<-produced
	close(stopKilling)
	kills := <-killed
	t.Logf("produced %d entries; SIGKILLed %d workers", sz.entries, kills)
	waitForBooks(t, f, s)
	checkBooks(t, s)
}

func produce(t *testing.T, s *setup) {
	every := s.sz.produceFor / time.Duration(s.sz.entries/10)
	for i := 0; i < s.sz.entries; i += 10 {
		if err := addBatch(s, i, min(i+10, s.sz.entries)); err != nil {
			t.Errorf("producer: %v", err)
			return
		}
		time.Sleep(every)
	}
}

// addBatch adds jobs [from, to), retried until it succeeds. With
// producerWait a batch counts only once a replica has it (WAIT on the
// pipeline's connection), so a failover cannot take back what the
// producer was told is written; a batch sent twice adds its jobs twice,
// which the books count as entries, not as jobs.
func addBatch(s *setup, from, to int) error {
	ctx := context.Background()
	var err error
	for range 20 {
		pipe := s.rdb.Pipeline()
		for j := from; j < to; j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []any{"job", strconv.Itoa(j)}})
		}
		var wait *redis.Cmd
		if s.producerWait {
			wait = pipe.Do(ctx, "WAIT", 1, 1000)
		}
		if _, err = pipe.Exec(ctx); err == nil && (wait == nil || wait.Val() == int64(1)) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("jobs %d-%d: no replica acknowledged them", from, to-1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// hoardJob numbers hoarded jobs after the produced ones, never poison.
func hoardJob(sz size, i int) int {
	return (sz.entries/sz.poisonEvery+1+i)*sz.poisonEvery + 1
}

// midRequeue makes a hoarder consumer read a large batch and go silent,
// waits until pelwarden has requeued part of it, and then calls strike
// with how many are still pending. It reports whether strike ran.
func midRequeue(t *testing.T, s *setup, strike func(left, held int64)) bool {
	t.Helper()
	ctx := context.Background()
	addJobs := s.rdb.Pipeline()
	for i := range s.sz.hoard {
		addJobs.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: []any{"job", strconv.Itoa(hoardJob(s.sz, i))}})
	}
	_, err := addJobs.Exec(ctx)
	require.NoError(t, err)
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "hoarder", Streams: []string{s.stream, ">"}, Count: int64(s.sz.hoard), Block: -1}).Result()
	require.NoError(t, err)
	held := int64(len(res[0].Messages))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p, err := s.rdb.XPending(ctx, s.stream, group).Result()
		if err != nil {
			continue
		}
		left := p.Consumers["hoarder"]
		if left > 0 && left < held {
			strike(left, held)
			return true
		}
		if left == 0 {
			return false // the whole batch went before the strike could land
		}
	}
	return false
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
