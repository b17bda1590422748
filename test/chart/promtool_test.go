package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// promtoolBuild builds promtool once, from the version pinned in
// tools/promtool/go.mod. remove_all_sd leaves out the service discovery
// plugins (cloud SDKs) that rule checks never use, which halves a cold
// build.
var promtoolBuild = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "pelwarden-promtool-")
	if err != nil {
		return "", err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "promtool")
	cmd := exec.Command("go", "build", "-tags", "remove_all_sd", "-modfile=tools/promtool/go.mod", "-o", bin,
		"github.com/prometheus/prometheus/cmd/promtool")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -modfile=tools/promtool/go.mod promtool: %w\n%s", err, out)
	}
	return bin, nil
})

// promtool runs promtool in dir.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	bin, err := promtoolBuild()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// unitTests is testdata/alerts_test.yaml, copied into dir beside the rules.
func unitTests(t *testing.T, dir string) string {
	t.Helper()
	content, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	require.NoError(t, err)
	path := filepath.Join(dir, "alerts_test.yaml")
	require.NoError(t, os.WriteFile(path, content, 0o600))
	return path
}

func TestRulesPassPromtoolCheckAndUnitTests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ruleFile(t, dir, renderRule(t, chartDir))
	unitTests(t, dir)

	out, err := promtool(t, dir, "check", "rules", "rules.yaml")
	require.NoError(t, err, "promtool check rules:\n%s", out)
	out, err = promtool(t, dir, "test", "rules", "alerts_test.yaml")
	require.NoError(t, err, "promtool test rules:\n%s", out)
}

// The unit tests are bound to the rules as shipped: a threshold moved in
// values.yaml, or a label renamed in the template, turns them red.
func TestUnitTestsFailWhenARuleChanges(t *testing.T) {
	t.Parallel()
	for name, sets := range map[string][]string{
		"a threshold":   {"prometheusRule.alerts.tlsCertExpiry.days=7"},
		"a for":         {"prometheusRule.alerts.ghostEntriesHeld.for=20m"},
		"a severity":    {"prometheusRule.alerts.hygieneErrors.severity=critical"},
		"an alert gone": {"prometheusRule.alerts.deadLetterGrowing.enabled=false"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ruleFile(t, dir, renderRule(t, chartDir, sets...))
			unitTests(t, dir)
			out, err := promtool(t, dir, "test", "rules", "alerts_test.yaml")
			require.Error(t, err, "promtool test rules should fail against the changed rules:\n%s", out)
			require.Contains(t, out, "FAILED")
		})
	}
}

// unitTestFile is the part of a promtool unit test file this check reads.
type unitTestFile struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func TestEveryAlertHasAFiringAndAQuietCase(t *testing.T) {
	t.Parallel()
	content, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	require.NoError(t, err)
	var file unitTestFile
	require.NoError(t, yaml.Unmarshal(content, &file))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	alerts := alertNames(renderRule(t, chartDir))
	for _, alert := range alerts {
		require.True(t, fires[alert], "alert %s needs a unit test where it fires", alert)
		require.True(t, quiet[alert], "alert %s needs a unit test where it stays quiet", alert)
	}
	for alert := range fires {
		require.True(t, slices.Contains(alerts, alert), "the unit tests name %s, which the chart does not ship", alert)
	}
}
