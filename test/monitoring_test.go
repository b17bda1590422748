package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// selected is one expression of a rule or a dashboard panel, as
// tools/promtool/metricnames reports it after parsing it with Prometheus's
// PromQL parser.
type selected struct {
	Source    string `json:"source"`
	Expr      string `json:"expr"`
	Selectors []struct {
		Metric string            `json:"metric"`
		Equal  map[string]string `json:"equal"`
	} `json:"selectors"`
}

// shippedRules renders the chart's PrometheusRule with the pinned helm and
// writes its groups as a Prometheus rule file.
func shippedRules(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "tool", "-modfile=tools/helm/go.mod", "-n", "helm")
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err, "building helm from tools/helm/go.mod")
	home := t.TempDir()
	render := exec.Command(strings.TrimSpace(string(out)), "template", "pw", "charts/pelwarden",
		"--set", "prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml")
	render.Dir = ".."
	render.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var stderr bytes.Buffer
	render.Stderr = &stderr
	manifest, err := render.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	var rule monitoringv1.PrometheusRule
	require.NoError(t, yaml.UnmarshalStrict(manifest, &rule))
	groups, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, groups, 0o600))
	return path
}

// shippedExpressions parses every expression of the chart's rules and
// dashboard.
func shippedExpressions(t *testing.T) []selected {
	t.Helper()
	tool := proctest.BuildTool(t, "../tools/promtool", "go.mod", "./metricnames")
	cmd := exec.Command(tool, "-rules", shippedRules(t), "-dashboard", "../charts/pelwarden/dashboards/pelwarden.json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "every PromQL expression of the rules and the dashboard must parse: %s", stderr.String())
	var exprs []selected
	require.NoError(t, json.Unmarshal(out, &exprs))
	return exprs
}

// exported is what one scrape of /metrics holds: each series name with
// the label values seen on it. A histogram or summary family counts with
// its _bucket, _sum and _count series.
func exported(t *testing.T, addr string) map[string][]map[string]string {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape(t, addr)))
	require.NoError(t, err)
	out := map[string][]map[string]string{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			series := []string{name}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				series = []string{name + "_bucket", name + "_sum", name + "_count"}
			case dto.MetricType_SUMMARY:
				series = []string{name, name + "_sum", name + "_count"}
			}
			for _, s := range series {
				out[s] = append(out[s], labels)
			}
		}
	}
	return out
}

// unexported lists what the expressions select that the scrape lacks.
func unexported(exprs []selected, series map[string][]map[string]string) []string {
	var missing []string
	for _, e := range exprs {
		for _, sel := range e.Selectors {
			have, ok := series[sel.Metric]
			if !ok {
				missing = append(missing, fmt.Sprintf("%s: %s is not exported", e.Source, sel.Metric))
				continue
			}
			if !slices.ContainsFunc(have, func(labels map[string]string) bool { return hasAll(labels, sel.Equal) }) {
				missing = append(missing, fmt.Sprintf("%s: no series of %s has %v", e.Source, sel.Metric, sel.Equal))
			}
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing)
}

func hasAll(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestEveryMetricTheRulesAndDashboardNameIsExported runs pelwarden with
// enough going on that every series it can export exists (gRPC TLS, a
// ghost whose entries hygiene dead-letters, one of them left for its
// fields, a Redis that is down and a
// hygiene target on it, KEDA polls that succeed and fail), scrapes
// /metrics, and checks each metric and exact label value that the chart's
// rules and dashboard select. A metric renamed in the code breaks here.
func TestEveryMetricTheRulesAndDashboardNameIsExported(t *testing.T) {
	t.Parallel()
	exprs := shippedExpressions(t)
	require.NotEmpty(t, exprs)

	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 2)
	// A replayed dead-letter record: giving it back would overwrite its
	// pelwarden-origin-id, so it stays pending (field-collision).
	require.NoError(t, rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "replayed", "pelwarden-origin-id", "1-1"}}).Err())
	redistest.AddJobs(t, rdb, "jobs", "later-", 2)
	redistest.Read(t, rdb, "jobs", "workers", "dead", 3)
	heartbeat(t, rdb, "hb:dead", time.Now().Add(-time.Hour))

	ca := tlstest.NewCA(t, "pelwarden-ca")
	secret := tlstest.NewSecretDir(t, tlstest.ServerFiles(ca.Server(t), ca))
	jobs := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "1", "reclaim": "requeue", "entryStaleSeconds": "0.1", "maxDeliveries": "1"}
	down := map[string]string{"redis": "down", "stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue"}
	cfg := testConfig(srv.Addr())
	cfg.Redis = append(cfg.Redis, config.DefaultRedis("down", closedAddr(t)))
	cfg.Hygiene.ScanInterval, cfg.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
	cfg.Hygiene.Targets = []map[string]string{jobs, down}
	cfg.GRPC.TLS = config.GRPCTLS{CertFile: secret.Path(tlstest.CertKey), KeyFile: secret.Path(tlstest.KeyKey), ReloadInterval: time.Second, MinVersion: "1.2"}
	p := runPelwarden(t, cfg, kedaCreds(t, ca.CertPEM, nil, nil))

	ctx := context.Background()
	eventually(t, 15*time.Second, func() error {
		// KEDA's polls: one that Redis answers, one it cannot.
		if _, err := metric(ctx, t, p.client, jobs); err != nil {
			return err
		}
		if _, err := metric(ctx, t, p.client, down); err == nil {
			return fmt.Errorf("a poll of the Redis that is down should fail")
		}
		// An HPA left on the placeholder of a trigger pelwarden serves.
		if _, err := p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(jobs), MetricName: "s0-pelwarden-refused"}); status.Code(err) != codes.FailedPrecondition {
			return fmt.Errorf("the placeholder of a served trigger: %w", err)
		}
		if missing := unexported(exprs, exported(t, p.app.HTTPAddr())); len(missing) > 0 {
			return fmt.Errorf("selected by the chart but not exported:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})
}

// The check above must be able to fail: a metric pelwarden does not
// export, or a label value none of its series has, is reported.
func TestUnexportedReportsWhatTheScrapeLacks(t *testing.T) {
	t.Parallel()
	var exprs []selected
	require.NoError(t, json.Unmarshal([]byte(`[
		{"source": "rule A", "selectors": [{"metric": "pelwarden_renamed_total"}]},
		{"source": "panel B", "selectors": [{"metric": "pelwarden_hygiene_actions_total", "equal": {"outcome": "dead-letterd"}}]},
		{"source": "panel C", "selectors": [{"metric": "pelwarden_hygiene_actions_total", "equal": {"outcome": "requeued"}}]}
	]`), &exprs))
	series := map[string][]map[string]string{"pelwarden_hygiene_actions_total": {{"outcome": "requeued"}}}
	require.Equal(t, []string{
		"panel B: no series of pelwarden_hygiene_actions_total has map[outcome:dead-letterd]",
		"rule A: pelwarden_renamed_total is not exported",
	}, unexported(exprs, series))
}
