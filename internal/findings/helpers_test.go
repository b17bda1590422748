package findings

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

const (
	stream = "jobs"
	group  = "workers"
)

// target parses trigger metadata for jobs/workers, with kv overriding.
func target(t *testing.T, kv ...string) liveness.Target {
	t.Helper()
	md := map[string]string{"stream": stream, "consumerGroup": group, "ghostIdleSeconds": "60"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	r, err := metadata.Parse(md, metadata.Env{Conns: []string{"default"}, Namespace: "jobs", Kubernetes: true})
	require.NoError(t, err)
	return r.Target
}

func kubeTarget(t *testing.T, kv ...string) liveness.Target {
	t.Helper()
	return target(t, append([]string{"liveness", "idle,kubernetes", "podSelector", "app=worker"}, kv...)...)
}

// addEntries appends n entries to the stream, creating the group at $ first.
func addEntries(t *testing.T, rdb *redis.Client, n int) []string {
	t.Helper()
	redistest.CreateGroup(t, rdb, stream, group)
	return redistest.AddJobs(t, rdb, stream, "", n)
}

// claimTo moves an entry to consumer, counting one more delivery.
func claimTo(t *testing.T, rdb *redis.Client, consumer, id string) {
	t.Helper()
	// Not JUSTID: that form leaves the delivery counter alone.
	got, err := rdb.XClaim(context.Background(), &redis.XClaimArgs{Stream: stream, Group: group, Consumer: consumer, Messages: []string{id}}).Result()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].ID)
}

// annotator adds the kubernetes source's view to an observation.
type annotator func(liveness.Target, *liveness.Observation)

// snapshot reads tg from Redis as the view does and judges it.
func snapshot(t *testing.T, addr string, tg liveness.Target, annotate annotator) *liveness.Snapshot {
	t.Helper()
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", addr)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 1000}
	obs, err := reader.Fetch(context.Background(), tg, nil)
	require.NoError(t, err)
	if annotate != nil {
		annotate(tg, &obs)
	}
	return liveness.Build(&tg, obs, nil, time.Now())
}

var workers = liveness.PodSet{Namespace: "jobs", Selector: "app=worker"}

func runningPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", Labels: map[string]string{"app": "worker"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// podWatcher runs the kubernetes source over a fake clientset holding pods
// and waits until it has synced.
func podWatcher(t *testing.T, client *fake.Clientset) *kube.Watcher {
	t.Helper()
	w := runPodWatcher(t, client)
	require.Eventually(t, func() bool { return w.Observe(workers, nil).Err == "" }, 15*time.Second, 5*time.Millisecond)
	return w
}

// forbiddenPodWatcher watches pods through a clientset whose every list
// RBAC refuses.
func forbiddenPodWatcher(t *testing.T) *kube.Watcher {
	t.Helper()
	client := fake.NewClientset(runningPod("w-0"))
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: access denied"))
	})
	w := runPodWatcher(t, client)
	require.Eventually(t, func() bool { return strings.HasPrefix(w.Observe(workers, nil).Err, "forbidden") }, 15*time.Second, 5*time.Millisecond)
	return w
}

func runPodWatcher(t *testing.T, client *fake.Clientset) *kube.Watcher {
	t.Helper()
	w := kube.New(kube.PodsFrom(client.CoreV1().Pods), kube.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// redisState is what Detect must leave as it found it.
type redisState struct {
	Entries   []redis.XMessage
	PEL       []pelRow
	Groups    []redis.XInfoGroup
	Consumers map[string]int64
}

type pelRow struct {
	ID, Consumer string
	Deliveries   int64
}

func stateOf(t *testing.T, rdb *redis.Client) redisState {
	t.Helper()
	ctx := context.Background()
	var s redisState
	var err error
	s.Entries, err = rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	pel, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100000}).Result()
	require.NoError(t, err)
	for _, p := range pel {
		s.PEL = append(s.PEL, pelRow{p.ID, p.Consumer, p.RetryCount})
	}
	s.Groups, err = rdb.XInfoGroups(ctx, stream).Result()
	require.NoError(t, err)
	cs, err := rdb.XInfoConsumers(ctx, stream, group).Result()
	require.NoError(t, err)
	s.Consumers = map[string]int64{}
	for _, c := range cs {
		s.Consumers[c.Name] = c.Pending
	}
	return s
}

// brief is a finding without its detail, for comparing.
type brief struct {
	Kind     Kind
	Consumer string
	IDs      []string
}

func briefs(fs []Finding) []brief {
	var out []brief
	for _, f := range fs {
		out = append(out, brief{f.Kind, f.Consumer, f.IDs})
	}
	return out
}

func ofKind(fs []Finding, k Kind) []Finding {
	return slices.DeleteFunc(slices.Clone(fs), func(f Finding) bool { return f.Kind != k })
}
