//go:build kube

package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/helmtest"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// The chart is installed as release pw in namespace apps; its
// ServiceAccount is pw-pelwarden there.
const (
	chartRelease   = "pw"
	chartNamespace = "apps"
	chartAccount   = "pw-pelwarden"
	// lockedNamespace is left out of rbac.namespaces.
	lockedNamespace = "locked"
)

// rbacKinds are the objects of the chart a ServiceAccount's access needs.
var rbacKinds = []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}

// realAPI is a real API server with the chart's ServiceAccount and RBAC
// applied, and a client configuration that authenticates as that
// ServiceAccount.
type realAPI struct {
	cluster *kubetest.Cluster
	admin   kubernetes.Interface
	account *rest.Config
}

// startRealAPI renders the chart with rbac.namespaces set to readable,
// applies its RBAC objects to a fresh API server, and gets a token for its
// ServiceAccount. The namespaces apps, locked and readable exist.
func startRealAPI(t *testing.T, readable ...string) *realAPI {
	t.Helper()
	c := kubetest.Start(t)
	admin := c.API.Client(t)
	for _, ns := range append([]string{chartNamespace, lockedNamespace}, readable...) {
		kubetest.CreateNamespace(t, admin, ns, nil)
	}
	helm, err := helmtest.Build()
	require.NoError(t, err)
	stream, err := helm.Template(t, chartRelease, chartNamespace, "--set", "rbac.namespaces={"+strings.Join(readable, ",")+"}")
	require.NoError(t, err)
	objs, err := kubetest.Decode(stream)
	require.NoError(t, err)
	rbac := slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return !slices.Contains(rbacKinds, o.GetKind()) })
	require.Len(t, rbac, 1+2*len(readable), "a ServiceAccount, and a Role and RoleBinding per namespace")
	applier, err := kubetest.NewApplier(c.API.Config())
	require.NoError(t, err)
	applier.Namespace = chartNamespace
	notServed, err := applier.ApplyAll(context.Background(), rbac)
	require.NoError(t, err)
	require.Empty(t, notServed)
	account := kubetest.ServiceAccountConfig(t, c.API, chartNamespace, chartAccount)
	return &realAPI{cluster: c, admin: admin, account: account}
}

// via points pelwarden's kubernetes source at url (the first API server,
// or a proxy in front of the servers), as the chart's ServiceAccount,
// through a kubeconfig file.
func (r *realAPI) via(t *testing.T, url string) func(*config.Config) {
	t.Helper()
	cfg := rest.CopyConfig(r.account)
	cfg.Host = url
	kubeconfig := kubetest.WriteKubeconfig(t, cfg)
	return func(c *config.Config) {
		c.Kubernetes.Enabled = true
		c.Kubernetes.Kubeconfig = kubeconfig
	}
}

// runningPod creates a worker pod through client, changed by mutate, and
// reports it Running, as a kubelet would.
func runningPod(t *testing.T, client kubernetes.Interface, namespace, name string, mutate ...func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": "worker"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:1"}}},
	}
	for _, m := range mutate {
		m(pod)
	}
	created, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	created.Status.Phase = corev1.PodRunning
	_, err = client.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// judged is one consumer as one DescribeTarget saw it.
type judged struct {
	at      time.Time
	verdict pelwardenv1.Verdict
	pod     string
	reasons string
}

// describe returns every consumer of a target as pelwarden judges it now.
func describe(ctx context.Context, admin pelwardenv1.AdminClient, stream, group string) (map[string]judged, error) {
	res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: stream, Group: group}})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := map[string]judged{}
	for _, c := range res.GetTarget().GetConsumers() {
		out[c.GetName()] = judged{at: now, verdict: c.GetVerdict(), pod: c.GetPod(), reasons: strings.Join(c.GetReasons(), "; ")}
	}
	return out, nil
}

// sampler records every verdict a target's consumers get, until stopped.
type sampler struct {
	mu      sync.Mutex
	samples map[string][]judged
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(t *testing.T, admin pelwardenv1.AdminClient, stream, group string) *sampler {
	t.Helper()
	s := &sampler{samples: map[string][]judged{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			seen, err := describe(context.Background(), admin, stream, group)
			if err != nil {
				continue
			}
			s.mu.Lock()
			for name, j := range seen {
				s.samples[name] = append(s.samples[name], j)
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.finish)
	return s
}

func (s *sampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// of returns the samples of one consumer.
func (s *sampler) of(name string) []judged {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples[name])
}
