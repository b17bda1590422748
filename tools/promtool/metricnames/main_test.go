package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func names(t *testing.T, rules, dashboards []string) []Expr {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(&out, rules, dashboards))
	var exprs []Expr
	require.NoError(t, json.Unmarshal(out.Bytes(), &exprs))
	return exprs
}

func TestRuleSelectorsAreListedWithTheirExactLabels(t *testing.T) {
	rules := write(t, "rules.yaml", `groups:
  - name: g
    rules:
      - alert: A
        expr: sum by (group) (increase(x_total{outcome="dead-lettered", code!~"OK"}[1h])) > 0 unless on (group) y
`)
	got := names(t, []string{rules}, nil)
	require.Equal(t, []Expr{{
		Source: "rule A",
		Expr:   `sum by (group) (increase(x_total{outcome="dead-lettered", code!~"OK"}[1h])) > 0 unless on (group) y`,
		Selectors: []Selector{
			{Metric: "x_total", Equal: map[string]string{"outcome": "dead-lettered"}},
			{Metric: "y"},
		},
	}}, got)
}

func TestDashboardQueriesAreParsedAfterGrafanasVariables(t *testing.T) {
	dash := write(t, "d.json", `{
  "panels": [
    {"title": "p", "targets": [{"expr": "rate(a_total{group=~\"$group\", kind=\"${kind}\"}[$__rate_interval])"}]},
    {"title": "row", "type": "row", "panels": [{"title": "inner", "targets": [{"expr": "b"}]}]}
  ],
  "templating": {"list": [
    {"name": "ds", "type": "datasource", "query": "prometheus"},
    {"name": "group", "type": "query", "query": {"query": "label_values(c{redis=~\"$redis\"}, group)"}},
    {"name": "top", "type": "query", "query": "query_result(topk(3, d))"}
  ]}
}`)
	got := names(t, nil, []string{dash})
	sources := map[string][]Selector{}
	for _, e := range got {
		sources[e.Source] = e.Selectors
	}
	require.Equal(t, map[string][]Selector{
		"panel p":        {{Metric: "a_total"}},
		"panel inner":    {{Metric: "b"}},
		"variable group": {{Metric: "c"}},
		"variable top":   {{Metric: "d"}},
	}, sources, "a label matched to a variable says nothing about which values exist")
}

func TestAnExpressionThatDoesNotParseIsAnErrorNamingIt(t *testing.T) {
	for name, tc := range map[string]struct {
		rules, dashboard, want string
	}{
		"rule":      {rules: "groups:\n  - name: g\n    rules:\n      - alert: Broken\n        expr: sum(rate(x[5m])\n", want: "Broken"},
		"panel":     {dashboard: `{"panels": [{"title": "Broken panel", "targets": [{"expr": "rate(x[$__rate_interval]"}]}]}`, want: "panel Broken panel"},
		"variable":  {dashboard: `{"templating": {"list": [{"name": "v", "type": "query", "query": "up"}]}}`, want: "variable v"},
		"no metric": {dashboard: `{"panels": [{"title": "nameless", "targets": [{"expr": "{job=\"x\"}"}]}]}`, want: "selects no metric by name"},
	} {
		t.Run(name, func(t *testing.T) {
			var rules, dashboards []string
			if tc.rules != "" {
				rules = append(rules, write(t, "rules.yaml", tc.rules))
			}
			if tc.dashboard != "" {
				dashboards = append(dashboards, write(t, "d.json", tc.dashboard))
			}
			err := run(&bytes.Buffer{}, rules, dashboards)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
