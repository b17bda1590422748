// Command metricnames parses every PromQL expression of Prometheus rule
// files and Grafana dashboards with Prometheus's own parser, and prints, as
// JSON, the metrics each one selects and the label values it matches
// exactly. The chart tests run it against the rules and the dashboard the
// chart ships, then check each name against a scrape of a running
// pelwarden. It lives in this module so Prometheus's dependency tree stays
// out of pelwarden's go.mod.
//
//	metricnames -rules rules.yaml -dashboard pelwarden.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Expr is one PromQL expression and what it selects.
type Expr struct {
	// Source says where the expression is: "rule <alert>", "panel <title>"
	// or "variable <name>".
	Source    string     `json:"source"`
	Expr      string     `json:"expr"`
	Selectors []Selector `json:"selectors"`
}

// Selector is one vector selector: a metric name and the labels it must
// have exactly (regex and negative matchers are left out: they need no
// particular value to exist).
type Selector struct {
	Metric string            `json:"metric"`
	Equal  map[string]string `json:"equal,omitempty"`
}

type files []string

func (f *files) String() string     { return fmt.Sprint(*f) }
func (f *files) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	var rules, dashboards files
	flag.Var(&rules, "rules", "a Prometheus rule file (repeatable)")
	flag.Var(&dashboards, "dashboard", "a Grafana dashboard JSON file (repeatable)")
	flag.Parse()
	if err := run(os.Stdout, rules, dashboards); err != nil {
		fmt.Fprintln(os.Stderr, "metricnames:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, rules, dashboards []string) error {
	if len(rules)+len(dashboards) == 0 || flag.NArg() > 0 {
		return errors.New("give -rules and -dashboard files, and nothing else")
	}
	var out []Expr
	var errs []error
	for _, path := range rules {
		exprs, err := ruleExprs(path)
		out, errs = append(out, exprs...), append(errs, err)
	}
	for _, path := range dashboards {
		exprs, err := dashboardExprs(path)
		out, errs = append(out, exprs...), append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

var promql = parser.NewParser(parser.Options{})

// ruleExprs reads a rule file the way Prometheus loads it (unknown fields
// refused, every expression parsed).
func ruleExprs(path string) ([]Expr, error) {
	content, err := os.ReadFile(path) //nolint:gosec // G304: the files named on the command line are the input
	if err != nil {
		return nil, err
	}
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.Join(errs...))
	}
	var out []Expr
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			source := "rule " + r.Alert
			if r.Record != "" {
				source = "recording rule " + r.Record
			}
			e, err := analyze(source, r.Expr, r.Expr)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// analyze parses query (expr after any substitution) and lists its
// selectors.
func analyze(source, expr, query string) (Expr, error) {
	node, err := promql.ParseExpr(query)
	if err != nil {
		return Expr{}, fmt.Errorf("%s: %q: %w", source, expr, err)
	}
	e := Expr{Source: source, Expr: expr, Selectors: []Selector{}}
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		sel := Selector{Metric: vs.Name}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == model.MetricNameLabel:
				if m.Type == labels.MatchEqual {
					sel.Metric = m.Value
				}
			case m.Type == labels.MatchEqual && m.Value != variableValue:
				if sel.Equal == nil {
					sel.Equal = map[string]string{}
				}
				sel.Equal[m.Name] = m.Value
			}
		}
		if sel.Metric == "" {
			errs = append(errs, fmt.Errorf("%s: %q selects no metric by name", source, expr))
		}
		e.Selectors = append(e.Selectors, sel)
		return nil
	})
	slices.SortFunc(e.Selectors, func(a, b Selector) int { return strings.Compare(a.Metric, b.Metric) })
	return e, errors.Join(errs...)
}
