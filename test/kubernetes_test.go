package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func workerPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", Labels: map[string]string{"app": "worker"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestPodDeletionRequeuesItsEntriesWithoutWaitingForAScan deletes the pod
// behind one of two consumers. The hygiene loop scans, and the view
// refreshes, once an hour, so only the deletion event can bring the
// entries back in time.
func TestPodDeletionRequeuesItsEntriesWithoutWaitingForAScan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 12)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 5)
	redistest.Read(t, rdb, "jobs", "workers", "w-1", 7)

	pods := fake.NewClientset(workerPod("w-0"), workerPod("w-1"))
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": "jobs", "podDeletionGraceSeconds": "0.5"}
	target := cloneWith(md, "reclaim", "requeue")
	p := startPelwarden(t, srv.Addr(), onlyPodEvents(target), app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))

	// The informer starts with the first read; a pod deleted before it
	// has listed the pods is never seen to go. Wait until pelwarden sees
	// both pods running (DescribeTarget reads afresh).
	waitPodsRunning(ctx, t, p)
	got, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(12), got, "both pods exist")

	require.NoError(t, pods.CoreV1().Pods("jobs").Delete(ctx, "w-1", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, func() error { return holdsNothing(ctx, rdb, "w-1") })
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(12+7), n, "each of w-1's entries was requeued once")
	got, err = metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(5), got, "only the live pod's entries are pending")
}

// waitPodsRunning waits until pelwarden sees every consumer's pod running
// (DescribeTarget reads afresh): the informer starts with the first read,
// and a pod deleted before it has listed the pods is never seen to go.
func waitPodsRunning(ctx context.Context, t *testing.T, p *pelwarden) {
	t.Helper()
	admin := pelwardenv1.NewAdminClient(p.conn)
	eventually(t, 5*time.Second, func() error {
		res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
		if err != nil {
			return err
		}
		for _, c := range res.GetTarget().GetConsumers() {
			if c.GetPod() != "running" {
				return fmt.Errorf("%s: pod %q", c.GetName(), c.GetPod())
			}
		}
		return nil
	})
}

// holdsNothing is nil once consumer has no pending entry in jobs/workers.
func holdsNothing(ctx context.Context, rdb *redis.Client, consumer string) error {
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil {
		return err
	}
	if n := p.Consumers[consumer]; n > 0 {
		return fmt.Errorf("%s still holds %d entries", consumer, n)
	}
	return nil
}

// onlyPodEvents enables the kubernetes source and looks after target with
// the view's refresh and the hygiene scan an hour apart, so that only a
// pod event can change anything in time.
func onlyPodEvents(target map[string]string) func(*config.Config) {
	return func(c *config.Config) {
		c.Kubernetes.Enabled = true
		c.Scaler.Freshness = time.Hour
		c.Hygiene.ScanInterval = time.Hour
		c.Hygiene.LeaseTTL = 2 * time.Hour
		c.Hygiene.Targets = []map[string]string{target}
	}
}

// anHoursGrace is a target that requeues the entries of consumers whose
// pods went, after an hour's podDeletionGraceSeconds.
var anHoursGrace = map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
	"podSelector": "app=worker", "podNamespace": "jobs", "podDeletionGraceSeconds": "3600", "reclaim": "requeue"}

// controlledBy makes kind (of apps/v1) the pod's controller.
func controlledBy(pod *corev1.Pod, kind string) *corev1.Pod {
	yes := true
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "workers", UID: "u", Controller: &yes}}
	return pod
}

// TestAReplicaSetPodsEntriesComeBackWithoutThePodGrace deletes two pods
// under an hour's podDeletionGraceSeconds: the ReplicaSet's pod, whose
// name no pod takes again, gives its entries back at once, told by the
// watch (the view and the scan wait an hour); the StatefulSet's pod, whose
// successor comes back under its name, keeps them through the grace.
func TestAReplicaSetPodsEntriesComeBackWithoutThePodGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 12)
	redistest.Read(t, rdb, "jobs", "workers", "sts-0", 5)
	redistest.Read(t, rdb, "jobs", "workers", "rs-7f9c-x2kq", 7)

	pods := fake.NewClientset(controlledBy(workerPod("sts-0"), "StatefulSet"), controlledBy(workerPod("rs-7f9c-x2kq"), "ReplicaSet"))
	p := startPelwarden(t, srv.Addr(), onlyPodEvents(anHoursGrace), app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	waitPodsRunning(ctx, t, p)

	for _, name := range []string{"sts-0", "rs-7f9c-x2kq"} {
		require.NoError(t, pods.CoreV1().Pods("jobs").Delete(ctx, name, metav1.DeleteOptions{}))
	}
	eventually(t, 10*time.Second, func() error { return holdsNothing(ctx, rdb, "rs-7f9c-x2kq") })
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Equal(t, int64(5), pending.Consumers["sts-0"], "the StatefulSet's pod is within its grace")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(12+7), n, "each of the ReplicaSet pod's entries was requeued once")
}

// TestSharedConsumerNameIsExportedAsAMetric: a consumer name read from
// after its pod went belongs to another process too; the PrometheusRule's
// PelwardenSharedConsumerName alert counts on this gauge.
func TestSharedConsumerNameIsExportedAsAMetric(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 3)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 2)

	pods := fake.NewClientset(workerPod("w-0"))
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": "jobs", "podDeletionGraceSeconds": "0.2"}
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) { c.Kubernetes.Enabled = true }, app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	series := fmt.Sprintf(`pelwarden_shared_consumer_names{group="workers",liveness=%q,redis="default",stream="jobs"} `, livenessLabel(t, md))
	admin := pelwardenv1.NewAdminClient(p.conn)
	eventually(t, 5*time.Second, func() error {
		if _, err := metric(ctx, t, p.client, md); err != nil {
			return err
		}
		// A pod deleted before the informer listed it is never seen to go.
		res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
		if err != nil {
			return err
		}
		if cs := res.GetTarget().GetConsumers(); len(cs) != 1 || cs[0].GetPod() != "running" {
			return fmt.Errorf("want w-0's pod running, got %v", cs)
		}
		if !strings.Contains(scrape(t, p.app.HTTPAddr()), series+"0") {
			return fmt.Errorf("want %s0 while the pod runs", series)
		}
		return nil
	})

	require.NoError(t, pods.CoreV1().Pods("jobs").Delete(ctx, "w-0", metav1.DeleteOptions{}))
	time.Sleep(500 * time.Millisecond)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 1) // someone else reads under the gone pod's name
	eventually(t, 5*time.Second, func() error {
		if _, err := metric(ctx, t, p.client, md); err != nil { // KEDA's poll reads the group
			return err
		}
		if !strings.Contains(scrape(t, p.app.HTTPAddr()), series+"1") {
			return fmt.Errorf("want %s1 once the name is read after its pod went", series)
		}
		return nil
	})
}

// TestAConsumerReadAfterItsPodWentIsReadOnceMoreSoon: the read after a
// ReplicaSet pod went finds its consumer's name still in use, a shared
// name, so its entries stay; that target is read once more 200 ms later
// (a read whose answer waited for the CPU can look newer than the pod's
// departure), not again after that, and nothing is given back.
// pelwarden's commands reach Redis 100 ms after it sends them, so the
// other process has read under the name after the pod went and before
// pelwarden's read runs, however the two are scheduled.
func TestAConsumerReadAfterItsPodWentIsReadOnceMoreSoon(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 3)
	ids := redistest.Read(t, rdb, "jobs", "workers", "rs-7f9c-x2kq", 2)
	pods := fake.NewClientset(controlledBy(workerPod("rs-7f9c-x2kq"), "ReplicaSet"))
	p := startPelwarden(t, delayedAddr(t, srv.Addr(), 100*time.Millisecond), onlyPodEvents(anHoursGrace), app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	waitPodsRunning(ctx, t, p)

	// Another process uses the name: it keeps claiming an entry to it,
	// which counts as a read.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_ = rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "rs-7f9c-x2kq", Messages: ids[:1]}).Err()
		}
	})
	defer func() { close(stop); wg.Wait() }()
	// The reads of pelwarden's start take 100 ms each: count from when
	// they are done.
	before := refreshes(t, p)
	for {
		time.Sleep(300 * time.Millisecond)
		n := refreshes(t, p)
		if n == before {
			break
		}
		before = n
	}
	require.NoError(t, pods.CoreV1().Pods("jobs").Delete(ctx, "rs-7f9c-x2kq", metav1.DeleteOptions{}))
	time.Sleep(time.Second)
	require.Equal(t, before+2, refreshes(t, p), "the read at the pod's going, and one more")
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), pending.Consumers["rs-7f9c-x2kq"], "a shared name keeps its entries")
}

// refreshes is how many target reads pelwarden has made.
func refreshes(t *testing.T, p *pelwarden) int {
	t.Helper()
	for line := range strings.Lines(scrape(t, p.app.HTTPAddr())) {
		if v, ok := strings.CutPrefix(line, "pelwarden_refresh_duration_seconds_count "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no pelwarden_refresh_duration_seconds_count")
	return 0
}
