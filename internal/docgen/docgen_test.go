package docgen

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// write makes TestReferencePagesAreCurrent write the pages instead of
// comparing them: `make generate` runs it so.
var write = flag.Bool("write", false, "write docs/reference/ from the code instead of checking it")

// TestReferencePagesAreCurrent renders every reference page of the main
// module and compares them with the committed files, so a renamed config
// key, metadata key or metric, or a new bench/results.json or
// bench/hpa-loop.json, fails until `make generate` is run.
func TestReferencePagesAreCurrent(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := Root(wd)
	require.NoError(t, err)
	cfgPage, err := Configuration(root)
	require.NoError(t, err)
	mdPage, err := TriggerMetadata()
	require.NoError(t, err)
	metricsPage, err := Metrics(metricFamilies(t))
	require.NoError(t, err)
	kedaPage, err := KEDAKeys()
	require.NoError(t, err)
	rulesPage, err := LivenessRules()
	require.NoError(t, err)
	perfPage, err := Performance(root)
	require.NoError(t, err)
	for _, p := range []Page{cfgPage, mdPage, metricsPage, kedaPage, rulesPage, perfPage} {
		path := filepath.Join(root, p.Path)
		if *write {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o750))
			require.NoError(t, os.WriteFile(path, p.Content, 0o644))
			continue
		}
		committed, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(committed, p.Content) {
			t.Errorf("%s is stale: run make generate", p.Path)
		}
	}
}

// metricFamilies builds a pelwarden with every optional collector on
// (grpc.tls, kubernetes with a hygiene target that watches pods) and
// lists what its /metrics serves. Redis is never dialed: New opens
// connections lazily.
func metricFamilies(t *testing.T) []app.MetricFamily {
	t.Helper()
	ca := tlstest.NewCA(t, "docgen")
	certs := tlstest.NewSecretDir(t, tlstest.ServerFiles(ca.Server(t, "localhost"), ca))
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.GRPC.TLS.CertFile, cfg.GRPC.TLS.KeyFile = certs.Path(tlstest.CertKey), certs.Path(tlstest.KeyKey)
	cfg.Redis = []config.Redis{config.DefaultRedis("default", "127.0.0.1:1")}
	cfg.Kubernetes.Enabled = true
	cfg.Hygiene.Targets = []map[string]string{{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue",
		"liveness": "kubernetes", "podSelector": "app=worker", "podNamespace": "jobs"}}
	pods := fake.NewClientset()
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	require.NoError(t, err)
	// Run on an ended context closes what New opened.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	t.Cleanup(func() { require.NoError(t, a.Run(ctx)) })
	families, err := a.MetricFamilies()
	require.NoError(t, err)
	return families
}
