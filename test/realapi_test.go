//go:build kube

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// pendingOf returns how many entries each consumer holds.
func pendingOf(t *testing.T, rdb *redis.Client, stream, group string) map[string]int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	require.NoError(t, err)
	return p.Consumers
}

// outage is how a test takes pelwarden's API server away and brings one
// back.
type outage struct {
	// via is the URL pelwarden's kubeconfig names.
	via string
	// down takes the API server away from pelwarden; writer is a client
	// that still reaches a server on the same etcd.
	down func(t *testing.T) (writer kubernetes.Interface)
	// up brings a ready API server back and returns when it was ready.
	up func(t *testing.T)
}

// TestRealAPIRestartNeverReclaimsEntriesOfARunningPod is issue 16's
// restart: the API server pelwarden watches through is killed and
// restarted on its port, and a second one on the same etcd takes the
// writes meanwhile.
func TestRealAPIRestartNeverReclaimsEntriesOfARunningPod(t *testing.T) {
	api := startRealAPI(t, "jobs")
	writer := api.cluster.StartAPIServer(t).Client(t)
	runOutage(t, api, outage{
		via:  api.cluster.API.URL(),
		down: func(*testing.T) kubernetes.Interface { api.cluster.API.Kill(); return writer },
		up:   func(t *testing.T) { api.cluster.API.Restart(t) },
	})
}

// TestRealAPIFailoverToAFreshServerRelistsOnTheExpiredWatch: pelwarden
// reaches the API through a load balancer. The balancer loses its server
// (connections refused) long enough for client-go's backoff to grow, then
// sends pelwarden to a server started after the pods changed: the watch
// pelwarden resumes gets 410 Gone. That expired watch must not be served
// as a current cache; pelwarden lists again at once.
func TestRealAPIFailoverToAFreshServerRelistsOnTheExpiredWatch(t *testing.T) {
	api := startRealAPI(t, "jobs")
	lb := kubetest.StartProxy(t, api.cluster.API)
	runOutage(t, api, outage{
		via:  lb.URL(),
		down: func(*testing.T) kubernetes.Interface { lb.Down(); return api.admin },
		up: func(t *testing.T) {
			fresh := api.cluster.StartAPIServer(t)
			require.NoError(t, lb.Up(fresh))
		},
	})
}

// runOutage: pelwarden watches w-0 and w-gone. The API goes away; w-gone
// is deleted and w-new created, and w-new reads entries, then sits idle
// past ghostIdle and entryStale. Until pelwarden's pod cache is current
// again every verdict that rests on pods is Unknown, so nothing of
// w-new's or w-0's is ever reclaimed; once it is, w-gone's entries come
// back.
func runOutage(t *testing.T, api *realAPI, o outage) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 30)
	runningPod(t, api.admin, "jobs", "w-0")
	runningPod(t, api.admin, "jobs", "w-gone")
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 5)
	redistest.Read(t, rdb, "jobs", "workers", "w-gone", 6)

	target := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": "jobs", "ghostIdleSeconds": "2", "podDeletionGraceSeconds": "1",
		"reclaim": "requeue", "entryStaleSeconds": "1"}
	useAPI := api.via(t, o.via)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		useAPI(c)
		c.Hygiene.ScanInterval = 300 * time.Millisecond
		c.Hygiene.Targets = []map[string]string{target}
	})
	admin := pelwardenv1.NewAdminClient(p.conn)
	eventually(t, 20*time.Second, func() error {
		seen, err := describe(ctx, admin, "jobs", "workers")
		if err != nil {
			return err
		}
		for _, name := range []string{"w-0", "w-gone"} {
			if seen[name].pod != "running" {
				return fmt.Errorf("%s: pod %q (%s)", name, seen[name].pod, seen[name].reasons)
			}
		}
		return nil
	})
	length, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	samples := startSampler(t, admin, "jobs", "workers")
	time.Sleep(2 * time.Second) // the watch has run a while: it is resumed, not listed, when it ends

	writer := o.down(t)
	require.NoError(t, writer.CoreV1().Pods("jobs").Delete(ctx, "w-gone", metav1.DeleteOptions{}))
	runningPod(t, writer, "jobs", "w-new")
	redistest.Read(t, rdb, "jobs", "workers", "w-new", 10)
	idleFrom := time.Now()
	time.Sleep(6 * time.Second) // past ghostIdle 2 s and entryStale 1 s, a dozen scans; client-go's backoff grows
	require.Equal(t, map[string]int64{"w-0": 5, "w-gone": 6, "w-new": 10}, pendingOf(t, rdb, "jobs", "workers"),
		"nothing moves while pelwarden cannot see the pods")

	restoring := time.Now()
	o.up(t)
	ready := time.Now()
	eventually(t, 30*time.Second, func() error {
		if held := pendingOf(t, rdb, "jobs", "workers")["w-gone"]; held > 0 {
			return fmt.Errorf("w-gone still holds %d entries", held)
		}
		return nil
	})
	returned := time.Since(ready)
	time.Sleep(3 * time.Second) // w-new's idle time keeps growing: it must stay unreclaimed
	samples.finish()

	require.Equal(t, map[string]int64{"w-0": 5, "w-new": 10}, pendingOf(t, rdb, "jobs", "workers"),
		"the running pods keep every entry they hold")
	after, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, length+6, after, "only w-gone's six entries were requeued, each once")
	requireUnknownUntilSeen(t, samples, idleFrom, restoring)
	t.Logf("API server ready to w-gone's entries requeued: %s (podDeletionGraceSeconds 1)", returned.Round(time.Millisecond))
}

// requireUnknownUntilSeen checks the verdicts sampled through an outage:
// the running pods' consumers are never Ghost, w-new is Unknown while idle
// and unseen, and w-gone turns Ghost only after the API came back.
func requireUnknownUntilSeen(t *testing.T, samples *sampler, idleFrom, restoring time.Time) {
	t.Helper()
	var unknownWhileIdle, judgedByPodAgain bool
	for _, name := range []string{"w-0", "w-new"} {
		for _, s := range samples.of(name) {
			require.NotEqual(t, pelwardenv1.Verdict_VERDICT_GHOST, s.verdict, "%s judged Ghost at %s: %s", name, s.at.Format(time.StampMilli), s.reasons)
			if name == "w-new" && s.at.After(idleFrom.Add(2500*time.Millisecond)) && s.at.Before(restoring) {
				require.Equal(t, pelwardenv1.Verdict_VERDICT_UNKNOWN, s.verdict, "w-new idle past ghostIdle with the API away: %s", s.reasons)
				require.Equal(t, "unobserved", s.pod)
				unknownWhileIdle = true
			}
			if name == "w-new" && s.pod == "running" {
				judgedByPodAgain = true
			}
		}
	}
	require.True(t, unknownWhileIdle, "w-new was sampled Unknown while idle and unseen")
	require.True(t, judgedByPodAgain, "w-new's pod is seen once the cache is current")
	for _, s := range samples.of("w-gone") {
		if s.verdict == pelwardenv1.Verdict_VERDICT_GHOST {
			require.True(t, s.at.After(restoring), "w-gone is a ghost only once its deletion is seen: %s", s.reasons)
		}
	}
}

// TestRealAPIRefusedNamespaceIsNamedInReasonMetricAndFindings: the chart's
// ServiceAccount may read pods in jobs only. A target whose pods live in
// another namespace is Unknown, and the reason, the metric and Findings
// all say RBAC refused it and which value grants it.
func TestRealAPIRefusedNamespaceIsNamedInReasonMetricAndFindings(t *testing.T) {
	api := startRealAPI(t, "jobs")
	runningPod(t, api.admin, lockedNamespace, "w-0")
	runningPod(t, api.admin, "jobs", "w-1")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 5)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 3)
	redistest.Read(t, rdb, "jobs", "workers", "w-1", 2)
	time.Sleep(1100 * time.Millisecond) // past ghostIdle: only the pods decide

	p := startPelwarden(t, srv.Addr(), api.via(t, api.cluster.API.URL()))
	locked := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": lockedNamespace, "ghostIdleSeconds": "1"}
	readable := cloneWith(locked, "podNamespace", "jobs", "consumerGroup", "readers")
	require.NoError(t, rdb.XGroupCreate(ctx, "jobs", "readers", "0").Err())
	want := "forbidden: the ServiceAccount may not list pods in locked (check rbac.namespaces)"

	admin := pelwardenv1.NewAdminClient(p.conn)
	eventually(t, 20*time.Second, func() error {
		if _, err := metric(ctx, t, p.client, readable); err != nil {
			return err
		}
		v, err := metric(ctx, t, p.client, locked)
		if err != nil {
			return err
		}
		seen, err := describe(ctx, admin, "jobs", "workers")
		if err != nil {
			return err
		}
		if w0 := seen["w-0"]; w0.verdict != pelwardenv1.Verdict_VERDICT_UNKNOWN || !strings.Contains(w0.reasons, want) || v != 5 {
			return fmt.Errorf("metric %d, w-0 %s: %s", v, w0.verdict, w0.reasons)
		}
		// The readable namespace's watch lists on its own schedule: its
		// first metric may be answered before it is current.
		if st := series(scrape(t, p.app.HTTPAddr()), "pelwarden_pod_watch_state")[`{namespace="jobs",selector="app=worker",state="current"}`]; st != "1" {
			return fmt.Errorf("the jobs pod watch is not current yet (%q)", st)
		}
		return nil
	})

	states := series(scrape(t, p.app.HTTPAddr()), "pelwarden_pod_watch_state")
	require.Equal(t, "1", states[`{namespace="locked",selector="app=worker",state="forbidden"}`], "states: %v", states)
	require.Equal(t, "0", states[`{namespace="locked",selector="app=worker",state="syncing"}`])
	require.Equal(t, "1", states[`{namespace="jobs",selector="app=worker",state="current"}`], "the namespace RBAC grants is read")

	res, err := admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
	require.NoError(t, err)
	var details []string
	for _, f := range res.GetFindings() {
		if f.GetKind() == pelwardenv1.FindingKind_FINDING_KIND_PODS_UNOBSERVED {
			details = append(details, f.GetDetail())
		}
	}
	require.Len(t, details, 1, "findings: %v", res.GetFindings())
	require.Contains(t, details[0], want)
}

// TestRealAPITwoTargetsOnOneGroupKeepTheirOwnSeries: one group judged by
// its pods and by idle time alone. w-1 has no pod: a ghost to the first,
// alive to the second. Every scrape shows one series per target, with the
// same values; the lag is the group's one series.
func TestRealAPITwoTargetsOnOneGroupKeepTheirOwnSeries(t *testing.T) {
	api := startRealAPI(t, "jobs")
	runningPod(t, api.admin, "jobs", "w-0")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 9)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 3)
	redistest.Read(t, rdb, "jobs", "workers", "w-1", 4)
	time.Sleep(1100 * time.Millisecond)

	p := startPelwarden(t, srv.Addr(), api.via(t, api.cluster.API.URL()))
	byPods := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": "jobs", "ghostIdleSeconds": "1"}
	byIdle := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "3600"}
	eventually(t, 20*time.Second, func() error {
		v, err := metric(ctx, t, p.client, byPods)
		if err != nil {
			return err
		}
		if v != 3 {
			return fmt.Errorf("by pods: %d, want 3", v)
		}
		_, err = metric(ctx, t, p.client, byIdle)
		return err
	})
	label := func(md map[string]string) string {
		return fmt.Sprintf(`{group="workers",liveness=%q,redis="default",stream="jobs"}`, livenessLabel(t, md))
	}
	for range 6 {
		body := scrape(t, p.app.HTTPAddr())
		require.Equal(t, map[string]string{label(byPods): "4", label(byIdle): "0"}, series(body, "pelwarden_ghost_pending_entries"))
		require.Equal(t, map[string]string{label(byPods): "3", label(byIdle): "7"}, series(body, "pelwarden_live_pending_entries"))
		require.Equal(t, map[string]string{label(byPods): "0", label(byIdle): "0"}, series(body, "pelwarden_unknown_pending_entries"))
		require.Equal(t, map[string]string{`{group="workers",redis="default",stream="jobs"}`: "2"}, series(body, "pelwarden_lag_entries"))
		time.Sleep(250 * time.Millisecond)
	}
}

// TestRealAPIReplicaSetPodGoesWithoutTheGrace: through a real API server's
// watch, a deleted pod that a ReplicaSet controls gives its entries back
// at once, under an hour's podDeletionGraceSeconds, while a StatefulSet's
// pod, deleted at the same moment, keeps them through the grace.
func TestRealAPIReplicaSetPodGoesWithoutTheGrace(t *testing.T) {
	api := startRealAPI(t, "jobs")
	owners := map[string]string{"w-7f9c-x2kq": "ReplicaSet", "w-0": "StatefulSet"}
	for name, kind := range owners {
		runningPod(t, api.admin, "jobs", name, func(p *corev1.Pod) { controlledBy(p, kind) })
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 9)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 4)
	redistest.Read(t, rdb, "jobs", "workers", "w-7f9c-x2kq", 5)

	via, tune := api.via(t, api.cluster.API.URL()), onlyPodEvents(anHoursGrace)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) { tune(c); via(c) })
	waitPodsRunning(ctx, t, p)
	for name := range owners {
		require.NoError(t, api.admin.CoreV1().Pods("jobs").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	}
	eventually(t, 20*time.Second, func() error { return holdsNothing(ctx, rdb, "w-7f9c-x2kq") })
	require.Equal(t, int64(4), pendingOf(t, rdb, "jobs", "workers")["w-0"], "the StatefulSet's pod is within its grace")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(9+5), n, "each of the ReplicaSet pod's entries was requeued once")
}
