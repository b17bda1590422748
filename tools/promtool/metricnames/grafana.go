package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

// dashboard is the part of a Grafana dashboard that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	// Panels are the panels of a collapsed row.
	Panels []panel `json:"panels"`
}

type variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Query is a string, or an object with the string in "query".
	Query json.RawMessage `json:"query"`
}

func dashboardExprs(path string) ([]Expr, error) {
	content, err := os.ReadFile(path) //nolint:gosec // G304: the files named on the command line are the input
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(content, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Expr
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				e, err := analyze("panel "+p.Title, t.Expr, substitute(t.Expr))
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				out = append(out, e)
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		e, err := variableExpr(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// variableExpr parses a query variable's label_values(selector, label) or
// query_result(expr).
func variableExpr(v variable) (Expr, error) {
	var query string
	if err := json.Unmarshal(v.Query, &query); err != nil {
		var obj struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &obj); err != nil {
			return Expr{}, fmt.Errorf("variable %s: query is neither a string nor an object with one: %w", v.Name, err)
		}
		query = obj.Query
	}
	source := "variable " + v.Name
	if m := labelValues.FindStringSubmatch(query); m != nil {
		return analyze(source, query, substitute(m[1]))
	}
	if m := queryResult.FindStringSubmatch(query); m != nil {
		return analyze(source, query, substitute(m[1]))
	}
	return Expr{}, fmt.Errorf("%s: %q is neither label_values(selector, label) nor query_result(expr)", source, query)
}

var (
	labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.+)\)\s*$`)

	// Grafana's interval variables stand where PromQL wants a duration.
	intervalVar = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?`)
	// Any other variable stands inside a label value.
	otherVar = regexp.MustCompile(`\$\{[a-zA-Z0-9_]+(:[a-z]+)?\}|\$[a-zA-Z_][a-zA-Z0-9_]*|\[\[[a-zA-Z0-9_]+\]\]`)
)

// variableValue replaces a Grafana variable in a label value; matchers on
// it say nothing about which values exist.
const variableValue = "grafana-variable"

// substitute replaces Grafana's variables with values PromQL accepts, as
// Grafana would before sending the query.
func substitute(expr string) string {
	expr = intervalVar.ReplaceAllString(expr, "5m")
	return otherVar.ReplaceAllString(expr, variableValue)
}
