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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	recoveryKills   = 20
	recoveryHeld    = 20 // entries the killed worker holds
	heartbeatMaxAge = 5  // seconds
)

// BenchmarkRecoveryAfterSIGKILL: a real worker process (test/chaosworker)
// holding K entries is SIGKILLed; the time runs until other workers have
// processed all of them, per the ledger the workers write. Then the ledger
// must show every job processed exactly once.
//
// heartbeat: pelwarden runs as its own process with its defaults (hygiene
// scan every 10 s, and a look at each deadline) and heartbeat
// liveness with a 5 s max age. Nothing polls the group, so a victim, dead
// seconds after it took its entries, is found holding them by the next
// scan. A helper stopped at a round's end leaves
// the group as a worker that deregisters does: otherwise the two would go
// silent within a max age of the next victim, and three of five consumers
// turning Ghost together trips the disruption breaker, as it should.
//
// kubernetes: pelwarden runs in this process on its defaults with the
// kubernetes source, because client-go's fake clientset lives here; each
// worker is named like its pod, and the victim's pod is deleted at the
// moment it is killed, as the kubelet would report it. The pods belong to
// a ReplicaSet (a Deployment's: no grace, names never return) or to a
// StatefulSet (podDeletionGraceSeconds, 2 s by default), in the same run.
// These report, next to the time until all were processed, the time until
// the first entry was requeued.
func BenchmarkRecoveryAfterSIGKILL(b *testing.B) {
	bins := proctest.Build(b, "../cmd/pelwarden", "../test/chaosworker")
	b.Run("liveness=heartbeat", func(b *testing.B) {
		r := newRecoveryRig(b, bins[1])
		cfg := writeHeartbeatConfig(b, r.addr)
		pw := proctest.Start(b, "pelwarden", bins[0], "serve", "--config", cfg)
		defer pw.Term()
		r.stopped = r.deregister
		r.measure()
	})
	for _, owner := range []string{ownerReplicaSet, ownerStatefulSet} {
		b.Run("liveness=kubernetes/owner="+owner, func(b *testing.B) {
			r := newRecoveryRig(b, bins[1])
			pods := fake.NewClientset()
			startPodWatchApp(b, r.addr, pods)
			ctx := context.Background()
			must := func(err error) {
				if err != nil {
					b.Fatal(err)
				}
			}
			r.born = func(name string) { must(createPod(ctx, pods, name, owner)) }
			gone := func(name string) { must(pods.CoreV1().Pods("jobs").Delete(ctx, name, metav1.DeleteOptions{})) }
			r.killed, r.stopped = gone, gone
			r.firstRequeue = true
			r.measure()
		})
	}
}

// The controllers of the benchmarks' pods: a ReplicaSet never gives a
// pod's name to another, a StatefulSet does.
const (
	ownerReplicaSet  = "ReplicaSet"
	ownerStatefulSet = "StatefulSet"
)

func writeHeartbeatConfig(b *testing.B, addr string) string {
	b.Helper()
	cfg := filepath.Join(b.TempDir(), "pelwarden.yaml")
	yml := fmt.Sprintf(`grpc: {addr: "127.0.0.1:0"}
http: {addr: "127.0.0.1:0"}
log: {level: warn}
redis:
  - {name: default, addr: %q}
hygiene:
  targets:
    - {stream: jobs, consumerGroup: workers, reclaim: requeue, liveness: heartbeat,
       heartbeatKey: "hb:{consumer}", heartbeatMaxAgeSeconds: "%d", entryStaleSeconds: "1"}
`, addr, heartbeatMaxAge)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// createPod creates a running worker pod that the owner kind (of apps/v1)
// controls; "" is a bare pod.
func createPod(ctx context.Context, pods *fake.Clientset, name, owner string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", Labels: map[string]string{"app": "worker"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if owner != "" {
		controller := true
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: owner, Name: "workers", UID: "workers-uid", Controller: &controller}}
	}
	_, err := pods.CoreV1().Pods("jobs").Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// recoveryRig runs the kill rounds; born, killed and stopped tell the
// liveness source about a worker's start, its SIGKILL and its clean stop.
type recoveryRig struct {
	b      *testing.B
	rdb    *redis.Client
	addr   string
	worker string
	seq    int

	born, killed, stopped func(name string)
	// firstRequeue also times each kill until the first of the victim's
	// entries left its PEL.
	firstRequeue bool
}

func newRecoveryRig(b *testing.B, worker string) *recoveryRig {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	if err := rdb.XGroupCreateMkStream(context.Background(), "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	nop := func(string) {}
	return &recoveryRig{b: b, rdb: rdb, addr: srv.Addr(), worker: worker, born: nop, killed: nop, stopped: nop}
}

func (r *recoveryRig) run(name string, args ...string) *proctest.Proc {
	r.born(name)
	return proctest.Start(r.b, name, r.worker, append([]string{"--redis", r.addr, "--stream", "jobs", "--group", "workers", "--consumer", name}, args...)...)
}

// measure runs recoveryKills rounds per iteration, checks the ledger and
// reports the percentiles.
func (r *recoveryRig) measure() {
	var lat, first latencies
	for r.b.Loop() {
		for round := range recoveryKills {
			all, one := r.round(round)
			lat, first = append(lat, all), append(first, one)
		}
	}
	r.b.StopTimer()
	r.verifyLedger()
	slices.Sort(lat)
	r.b.ReportMetric(lat[len(lat)/2].Seconds(), "p50-s")
	r.b.ReportMetric(lat[(len(lat)*99)/100].Seconds(), "p99-s")
	r.b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
	if r.firstRequeue {
		slices.Sort(first)
		r.b.ReportMetric(first[len(first)/2].Seconds(), "first-p50-s")
		r.b.ReportMetric(first[(len(first)*99)/100].Seconds(), "first-p99-s")
	}
	r.b.ReportMetric(float64(len(lat)), "kills")
	r.b.ReportMetric(recoveryHeld, "entries-per-kill")
}

// round starts a victim that reads recoveryHeld new jobs and sits on them,
// starts two helpers, kills the victim and times until the ledger has
// every one of its jobs, and until the first of them left its PEL.
func (r *recoveryRig) round(round int) (all, first time.Duration) {
	b, ctx := r.b, context.Background()
	r.seq++
	jobs := make([]string, recoveryHeld)
	pipe := r.rdb.Pipeline()
	for i := range jobs {
		jobs[i] = strconv.Itoa(r.seq*1000 + i)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", jobs[i]}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("victim-%d", r.seq)
	victim := r.run(name, "--count", strconv.Itoa(recoveryHeld), "--min-process", "1h", "--max-process", "1h")
	waitFor(b, 10*time.Second, func() bool {
		p, err := r.rdb.XPending(ctx, "jobs", "workers").Result()
		return err == nil && p.Consumers[name] == recoveryHeld
	})
	helpers := []*proctest.Proc{r.run(fmt.Sprintf("helper-%d-a", r.seq)), r.run(fmt.Sprintf("helper-%d-b", r.seq))}
	time.Sleep(time.Duration(round%5) * 100 * time.Millisecond) // kills land at different points of the refresh cycle
	victim.Kill()
	r.killed(name)
	killed := time.Now()
	waitFor(b, 60*time.Second, func() bool {
		if first == 0 && r.firstRequeue {
			if p, err := r.rdb.XPending(ctx, "jobs", "workers").Result(); err == nil && p.Consumers[name] < recoveryHeld {
				first = time.Since(killed)
			}
		}
		got, err := r.rdb.HMGet(ctx, "ledger", jobs...).Result()
		return err == nil && !slices.Contains(got, nil)
	})
	all = time.Since(killed)
	for _, h := range helpers {
		h.Term()
		r.stopped(h.Name)
	}
	return all, first
}

// deregister removes a cleanly stopped worker from the group and its
// heartbeat, once its PEL is empty (it acknowledged what it held).
func (r *recoveryRig) deregister(name string) {
	ctx := context.Background()
	p, err := r.rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil {
		r.b.Fatal(err)
	}
	if n := p.Consumers[name]; n != 0 {
		r.b.Fatalf("%s stopped holding %d entries", name, n)
	}
	if err := r.rdb.XGroupDelConsumer(ctx, "jobs", "workers", name).Err(); err != nil {
		r.b.Fatal(err)
	}
	if err := r.rdb.Del(ctx, "hb:"+name).Err(); err != nil {
		r.b.Fatal(err)
	}
}

// verifyLedger checks that every held job was processed exactly once.
func (r *recoveryRig) verifyLedger() {
	counts, err := r.rdb.HGetAll(context.Background(), "ledger").Result()
	if err != nil {
		r.b.Fatal(err)
	}
	if len(counts) != r.seq*recoveryHeld {
		r.b.Fatalf("ledger has %d jobs, want %d", len(counts), r.seq*recoveryHeld)
	}
	for job, n := range counts {
		if n != "1" {
			r.b.Fatalf("job %s processed %s times", job, n)
		}
	}
}

func waitFor(b *testing.B, within time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("condition not met within %s", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
