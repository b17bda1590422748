//go:build kube

package chart

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/pelwarden/pelwarden/internal/kubetest"
)

// crdGroups are the API groups of the custom resources the chart may
// render. A kind of these groups is left out when its CRD is not
// installed; any other unserved kind fails.
var crdGroups = []string{"monitoring.coreos.com"}

// warnings collects the Warning headers the API server sends, such as a
// PodSecurity violation of a Deployment's pod template.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.text
	w.text = nil
	return out
}

// TestRealAPIAcceptsEveryValuesRender is `helm template ... | kubectl apply
// --server-side --dry-run=server` for every render case and every ci/
// values file: a real API server defaults, validates and admits each
// object (RBAC escalation checks, PodSecurity restricted as a warning on
// the Deployment) and stores nothing. The kinds left out, with no
// Prometheus Operator installed, are the all-on values' ServiceMonitor and
// PrometheusRule: they are reported, not dropped.
func TestRealAPIAcceptsEveryValuesRender(t *testing.T) {
	c := kubetest.Start(t)
	admin := c.API.Client(t)
	restricted := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}
	// "monitoring" is where the all-on values put the dashboard ConfigMap,
	// next to a Grafana.
	for _, ns := range []string{namespace, "workers", "monitoring"} {
		kubetest.CreateNamespace(t, admin, ns, restricted)
	}
	cfg := c.API.Config()
	warned := &warnings{}
	cfg.WarningHandler = warned
	applier, err := kubetest.NewApplier(cfg)
	require.NoError(t, err)
	applier.DryRun, applier.Namespace = true, namespace

	cases := map[string][]string{"the first install's values": valueArgs([]string{filepath.Join(chartDir, "examples", firstValues)}, nil)}
	for name, rc := range renderCases() {
		cases[name] = valueArgs(rc.files, rc.sets)
	}
	ciFiles, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, ciFiles)
	for _, f := range ciFiles {
		cases["ci/"+filepath.Base(f)] = valueArgs([]string{f}, nil)
	}
	notServedAll := map[schema.GroupVersionKind]bool{}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			stream, err := helm.Template(t, releaseName, namespace, args...)
			require.NoError(t, err)
			objs, err := kubetest.Decode(stream)
			require.NoError(t, err)
			require.NotEmpty(t, objs)
			notServed, err := applier.ApplyAll(context.Background(), objs)
			require.NoError(t, err, "the API server refuses a rendered object")
			for _, gvk := range notServed {
				require.True(t, slices.Contains(crdGroups, gvk.Group), "%s is not a CRD kind, yet the server does not serve it", gvk)
				notServedAll[gvk] = true
			}
			require.Empty(t, warned.take(), "the API server warns about the render")
		})
	}
	require.Equal(t, map[schema.GroupVersionKind]bool{
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}: true,
		{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}: true,
	}, notServedAll, "only the Prometheus Operator's kinds are left out")

	t.Run("the first install's KEDA and cert-manager objects", func(t *testing.T) {
		dryRunFirstInstall(t, c, warned)
	})
}

// dryRunFirstInstall installs KEDA's and cert-manager's CRDs (from their
// modules, as the schema checks read them) and applies, as a server-side
// dry run, the first install's TriggerAuthentication, ScaledObject and
// cert-manager recipe: the API server validates each against its CRD, and
// unknown fields fail.
func dryRunFirstInstall(t *testing.T, c *kubetest.Cluster, warned *warnings) {
	admin := c.API.Client(t)
	for _, ns := range []string{"jobs", "pelwarden", "cert-manager"} {
		kubetest.CreateNamespace(t, admin, ns, nil)
	}
	cfg := c.API.Config()
	cfg.WarningHandler = warned
	installer, err := kubetest.NewApplier(cfg)
	require.NoError(t, err)
	for _, m := range []*crdModule{kedaModule, certManagerModule} {
		files, err := m.crdFiles()
		require.NoError(t, err)
		for _, f := range files {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			objs, err := kubetest.Decode(string(raw))
			require.NoError(t, err)
			_, err = installer.ApplyAll(context.Background(), objs)
			require.NoError(t, err, "install %s", filepath.Base(f))
		}
	}
	var stream strings.Builder
	for _, name := range []string{firstAuth, firstScaled, certManager} {
		stream.WriteString(exampleFile(t, name) + "\n---\n")
	}
	objs, err := kubetest.Decode(stream.String())
	require.NoError(t, err)
	require.Len(t, objs, 7, "TriggerAuthentication, ScaledObject, two issuers and three Certificates")
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The CRDs are served once established; discovery is read anew.
		applier, err := kubetest.NewApplier(cfg)
		require.NoError(t, err)
		applier.DryRun = true
		notServed, err := applier.ApplyAll(context.Background(), objs)
		if len(notServed) == 0 || time.Now().After(deadline) {
			require.Empty(t, notServed, "the CRDs are served")
			require.NoError(t, err, "the API server refuses a first install object")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Empty(t, warned.take(), "the API server warns about the first install")
}
