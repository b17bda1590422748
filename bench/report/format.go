package main

import (
	"fmt"
	"math"
	"strings"
)

func ptr(f Figure) *Figure { return &f }

// latency is a p50 / p99 pair given in µs.
func latency(p50, p99 float64) Figure {
	return Figure{Labels: []string{"p50", "p99"}, Values: []float64{p50, p99}, Unit: "µs", Text: dur(p50/1e6) + " / " + dur(p99/1e6)}
}

// millis is a p50 / p99 pair given in ms.
func millis(p50, p99 float64) Figure {
	return Figure{Labels: []string{"p50", "p99"}, Values: []float64{p50, p99}, Unit: "ms", Text: dur(p50/1e3) + " / " + dur(p99/1e3)}
}

// seconds is one value, or a p50 / p99 pair, given in s.
func seconds(v ...float64) Figure {
	f := Figure{Values: v, Unit: "s"}
	texts := make([]string, len(v))
	for i, x := range v {
		texts[i] = dur(x)
	}
	if len(v) == 2 {
		f.Labels = []string{"p50", "p99"}
	}
	f.Text = strings.Join(texts, " / ")
	return f
}

func rate(v float64, unit string) Figure {
	return Figure{Values: []float64{v}, Unit: unit, Text: count(v) + " " + unit}
}

func plain(v float64, unit string) Figure {
	return Figure{Values: []float64{v}, Unit: unit, Text: fmt.Sprintf("%.0f %s", v, unit)}
}

// dur prints seconds with a unit that keeps 2-3 significant digits.
func dur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "missing"
	case s >= 1:
		return trim(fmt.Sprintf("%.4g", s)) + " s"
	case s >= 1e-3:
		return trim(fmt.Sprintf("%.3g", s*1e3)) + " ms"
	default:
		return trim(fmt.Sprintf("%.3g", s*1e6)) + " µs"
	}
}

// count prints 163000 as 163k and 1000000 as 1M.
func count(v float64) string {
	switch {
	case math.IsNaN(v):
		return "missing"
	case v >= 1e6:
		return trim(fmt.Sprintf("%.3g", v/1e6)) + "M"
	case v >= 1e3:
		return trim(fmt.Sprintf("%.3g", v/1e3)) + "k"
	default:
		return trim(fmt.Sprintf("%.3g", v))
	}
}

// trim drops the exponent form %g may choose for whole numbers.
func trim(s string) string {
	var f float64
	if strings.ContainsRune(s, 'e') {
		if _, err := fmt.Sscan(s, &f); err == nil {
			return fmt.Sprintf("%.0f", f)
		}
	}
	return s
}

func ratioText(r []float64) string {
	if len(r) == 0 {
		return "—"
	}
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = fmt.Sprintf("%.2fx", x)
		if x >= 10 {
			parts[i] = fmt.Sprintf("%.1fx", x)
		}
	}
	return strings.Join(parts, " / ")
}

// markdown is the table: one row per comparison, ratios next to the
// absolute figures.
func markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| what | workload | pelwarden | compared with | its figure | pelwarden ÷ it |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		against, base := "—", "—"
		if r.Against != "" {
			against = r.Against
		}
		if r.Baseline != nil {
			base = r.Baseline.Text
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.What, r.Workload, r.Pelwarden.Text, against, base, ratioText(r.Ratio))
	}
	return b.String()
}
