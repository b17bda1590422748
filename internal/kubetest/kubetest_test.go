//go:build kube

package kubetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "worker"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "worker:1"}}},
	}
}

// TestRealAPIClusterSurvivesAKilledServerAndServesFromASecond: objects live in
// etcd, so a restarted server and a second one both serve them, and a
// client configured for the first reconnects after its restart.
func TestRealAPIClusterSurvivesAKilledServerAndServesFromASecond(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	admin := c.API.Client(t)
	CreateNamespace(t, admin, "jobs", nil)
	_, err := admin.CoreV1().Pods("jobs").Create(ctx, testPod("w-0"), metav1.CreateOptions{})
	require.NoError(t, err)

	c.API.Kill()
	require.False(t, c.API.Ready())
	_, err = admin.CoreV1().Pods("jobs").Get(ctx, "w-0", metav1.GetOptions{})
	require.Error(t, err, "a killed server answers nothing")

	second := c.StartAPIServer(t)
	require.NotEqual(t, c.API.URL(), second.URL())
	_, err = second.Client(t).CoreV1().Pods("jobs").Create(ctx, testPod("w-1"), metav1.CreateOptions{})
	require.NoError(t, err, "the second server writes to the same etcd")

	c.API.Restart(t)
	pods, err := admin.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the client of the first server reconnects after its restart")
	require.Len(t, pods.Items, 2)
}

// TestRealAPIServiceAccountConfigIsBoundByRBAC: a token of a ServiceAccount with
// no role may not list pods, and a kubeconfig written for it says so too.
func TestRealAPIServiceAccountConfigIsBoundByRBAC(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	admin := c.API.Client(t)
	CreateNamespace(t, admin, "jobs", nil)
	_, err := admin.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the admin token may list")

	cfg := ServiceAccountConfig(t, c.API, "jobs", "default")
	fromFile, err := clientcmd.BuildConfigFromFlags("", WriteKubeconfig(t, cfg))
	require.NoError(t, err)
	for name, cfg := range map[string]*rest.Config{"token": cfg, "kubeconfig": fromFile} {
		client, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		_, err = client.CoreV1().Pods("jobs").List(ctx, metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "%s: want 403, got %v", name, err)
	}
}
