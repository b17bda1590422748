package chart

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// monitoringOn switches on the PrometheusRule and the dashboard ConfigMap
// and leaves every other value at its default, the values the promtool
// unit tests in testdata/alerts_test.yaml are written for.
var monitoringOn = []string{"prometheusRule.enabled=true", "grafanaDashboard.enabled=true"}

// dashboardKey is the dashboard's file name in the ConfigMap.
const dashboardKey = "pelwarden.json"

// renderRule renders the chart with sets and returns its PrometheusRule,
// decoded strictly.
func renderRule(t *testing.T, dir string, sets ...string) *monitoringv1.PrometheusRule {
	t.Helper()
	stream, err := renderChart(t, dir, nil, append(slices.Clone(monitoringOn), sets...))
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err)
	rule, err := only[*monitoringv1.PrometheusRule](objs)
	require.NoError(t, err)
	return rule
}

// alertNames lists a PrometheusRule's alerts in order.
func alertNames(rule *monitoringv1.PrometheusRule) []string {
	var names []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	return names
}

// checkMonitoring checks the PrometheusRule and the dashboard ConfigMap of
// a render: both or neither, as want.optional says.
func checkMonitoring(objs []object, w want) error {
	rules := all[*monitoringv1.PrometheusRule](objs)
	var dashboards []*corev1.ConfigMap
	for _, cm := range all[*corev1.ConfigMap](objs) {
		if _, ok := cm.Data[dashboardKey]; ok {
			dashboards = append(dashboards, cm)
		}
	}
	count := 0
	if w.optional {
		count = 1
	}
	if len(rules) != count || len(dashboards) != count {
		return fmt.Errorf("want %d PrometheusRule and %d dashboard ConfigMap, got %d and %d", count, count, len(rules), len(dashboards))
	}
	if count == 0 {
		return nil
	}
	return errors.Join(checkRuleObject(rules[0]), checkDashboardConfigMap(dashboards[0]))
}

var severities = []string{"critical", "warning", "info"}

// checkRuleObject: every rule is an alert with a for, a severity and the
// annotations an on-call person reads first.
func checkRuleObject(rule *monitoringv1.PrometheusRule) error {
	var errs []error
	if len(rule.Spec.Groups) != 1 || len(rule.Spec.Groups[0].Rules) == 0 {
		return fmt.Errorf("PrometheusRule: want one group of rules, got %d groups", len(rule.Spec.Groups))
	}
	for _, r := range rule.Spec.Groups[0].Rules {
		if r.Alert == "" || r.Expr.String() == "" || r.For == nil {
			errs = append(errs, fmt.Errorf("PrometheusRule: every rule is an alert with an expr and a for, got %+v", r))
		}
		if !slices.Contains(severities, r.Labels["severity"]) {
			errs = append(errs, fmt.Errorf("alert %s: severity must be one of %v, got %q", r.Alert, severities, r.Labels["severity"]))
		}
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[key] == "" {
				errs = append(errs, fmt.Errorf("alert %s: annotation %s is missing", r.Alert, key))
			}
		}
	}
	return errors.Join(errs...)
}

func checkDashboardConfigMap(cm *corev1.ConfigMap) error {
	if cm.Labels["grafana_dashboard"] != "1" {
		return fmt.Errorf("dashboard ConfigMap %s must carry the label grafana_dashboard=1 the Grafana sidecar looks for, got %v", cm.Name, cm.Labels)
	}
	shipped, err := os.ReadFile(filepath.Join(chartDir, "dashboards", dashboardKey))
	if err != nil {
		return err
	}
	if strings.TrimSpace(cm.Data[dashboardKey]) != strings.TrimSpace(string(shipped)) {
		return fmt.Errorf("dashboard ConfigMap %s must hold dashboards/%s as it is", cm.Name, dashboardKey)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []any  `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data[dashboardKey]), &d); err != nil {
		return fmt.Errorf("dashboard ConfigMap %s: %w", cm.Name, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		return fmt.Errorf("dashboard needs a uid, a title and panels, got uid %q title %q and %d panels", d.UID, d.Title, len(d.Panels))
	}
	return nil
}

func TestRulesAndDashboardRenderAsValidObjects(t *testing.T) {
	t.Parallel()
	stream, err := renderChart(t, chartDir, nil, monitoringOn)
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err, "the PrometheusRule must decode strictly into prometheus-operator's type")
	require.NoError(t, checkMonitoring(objs, want{optional: true}))
	rule, err := only[*monitoringv1.PrometheusRule](objs)
	require.NoError(t, err)
	require.Equal(t, []string{
		"PelwardenGhostEntriesHeld", "PelwardenGhostsNotScanned", "PelwardenHygieneErrors",
		"PelwardenSnapshotStale", "PelwardenRedisReadsFailing", "PelwardenRedisRefusesWrites", "PelwardenDeadLetterGrowing",
		"PelwardenEntriesStuckOnFieldCollision", "PelwardenTLSCertificateExpiring", "PelwardenTLSReloadFailed", "PelwardenSharedConsumerName",
		"PelwardenHeartbeatMisconfigured", "PelwardenDisruptionBreakerHolding", "PelwardenScalerErrors", "PelwardenHPAOnPlaceholder",
	}, alertNames(rule))
}

// Each alert can be switched off on its own, and its labels follow the
// values.
func TestAlertValuesShapeTheRule(t *testing.T) {
	t.Parallel()
	rule := renderRule(t, chartDir,
		"prometheusRule.alerts.ghostsNotScanned.enabled=false",
		"prometheusRule.alerts.scalerErrors.severity=info",
		"prometheusRule.additionalAlertLabels.team=platform",
		"prometheusRule.labels.release=prometheus")
	require.NotContains(t, alertNames(rule), "PelwardenGhostsNotScanned")
	require.Equal(t, "prometheus", rule.Labels["release"])
	for _, r := range rule.Spec.Groups[0].Rules {
		require.Equal(t, "platform", r.Labels["team"], "alert %s", r.Alert)
		if r.Alert == "PelwardenScalerErrors" {
			require.Equal(t, "info", r.Labels["severity"])
		}
	}
}

// The snapshot alert watches the targets whose latest read failed: a
// group read only for its polls has an old snapshot between them, which
// is no fault.
func TestSnapshotStaleWatchesTheReadsThatFail(t *testing.T) {
	t.Parallel()
	rule := renderRule(t, chartDir)
	for _, r := range rule.Spec.Groups[0].Rules {
		if r.Alert == "PelwardenSnapshotStale" {
			require.Contains(t, r.Expr.String(), "pelwarden_read_failing")
			require.NotContains(t, r.Expr.String(), "pelwarden_snapshot_age_seconds")
			return
		}
	}
	t.Fatal("no PelwardenSnapshotStale alert")
}

// Every alert's runbook_url points at a section of the chart README with
// the alert's name as its heading.
func TestEveryAlertHasARunbookSection(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} (.+)$`).FindAllStringSubmatch(string(readme), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	rule := renderRule(t, chartDir)
	for _, r := range rule.Spec.Groups[0].Rules {
		url := r.Annotations["runbook_url"]
		base, anchor, ok := strings.Cut(url, "#")
		require.True(t, ok, "alert %s: runbook_url %q has no anchor", r.Alert, url)
		require.True(t, strings.HasSuffix(base, "charts/pelwarden/README.md"), "alert %s: runbook_url %q should point at the chart README", r.Alert, url)
		require.Equal(t, strings.ToLower(r.Alert), anchor)
		require.True(t, anchors[anchor], "the chart README needs a section headed %s for its runbook", r.Alert)
	}
}

// githubAnchor is the anchor GitHub gives a heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// ruleFile writes a PrometheusRule's groups as a Prometheus rule file.
func ruleFile(t *testing.T, dir string, rule *monitoringv1.PrometheusRule) string {
	t.Helper()
	content, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	require.NoError(t, err)
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, content, 0o600))
	return path
}
