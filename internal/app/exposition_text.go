package app

import (
	"bufio"
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// textFamilies writes the per-target families in the text format
// directly, row by row: no message per series, and of a set's labels only
// each row's rendered text is kept, about a third of the bytes of its
// label pairs. At 10k targets the pairs were the live heap's peak at each
// scrape, which the garbage collector's goal, and so the process's RSS,
// followed.
type textFamilies struct {
	w   *bufio.Writer
	buf []byte
}

// textRows is a set's rendered label text, one per row ({a="x",b="y"}).
type textRows struct {
	t      *textFamilies
	labels []string
}

func (t *textFamilies) rows(names []string, n int, values func(i int) []string) familyRows {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(names[a], names[b]) })
	labels := make([]string, n)
	var b strings.Builder
	for i := range n {
		vs := values(i)
		b.Reset()
		b.WriteByte('{')
		for j, k := range order {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(names[k])
			b.WriteString(`="`)
			labelEscaper.WriteString(&b, vs[k]) //nolint:errcheck // a strings.Builder does not fail
			b.WriteByte('"')
		}
		b.WriteByte('}')
		labels[i] = b.String()
	}
	return textRows{t: t, labels: labels}
}

func (r textRows) family(name, help string, kind dto.MetricType, value func(i int) float64) error {
	if len(r.labels) == 0 {
		return nil
	}
	w := r.t.w
	typ := "gauge"
	if kind == dto.MetricType_COUNTER {
		typ = "counter"
	}
	_, _ = w.WriteString("# HELP " + name + " ")
	_, _ = helpEscaper.WriteString(w, help)
	_, _ = w.WriteString("\n# TYPE " + name + " " + typ + "\n")
	for i, l := range r.labels {
		_, _ = w.WriteString(name)
		_, _ = w.WriteString(l)
		_ = w.WriteByte(' ')
		r.t.buf = appendValue(r.t.buf[:0], value(i))
		_, _ = w.Write(r.t.buf)
		if err := w.WriteByte('\n'); err != nil {
			return err
		}
	}
	return nil
}

// The text format's escapes: a label value escapes backslash, quote and
// newline; help text backslash and newline.
var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// appendValue writes a sample value as the text format does.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
