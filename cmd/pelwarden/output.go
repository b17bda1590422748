package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// format is how a command prints its answer.
type format string

const (
	formatTable format = "table"
	// formatWide is the table with every column and every reason whole.
	formatWide format = "wide"
	formatJSON format = "json"
	formatYAML format = "yaml"
)

var formats = []format{formatTable, formatWide, formatJSON, formatYAML}

func (f format) valid() bool { return slices.Contains(formats, f) }

// structured says the answer is printed as the API's message, not a table.
func (f format) structured() bool { return f == formatJSON || f == formatYAML }

// printMessage writes one response in the structured format f.
func printMessage(w io.Writer, f format, m proto.Message) error {
	if f == formatYAML {
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		return writeYAML(w, b)
	}
	return printJSON(w, m)
}

// printMessages writes several responses as one list.
func printMessages[M proto.Message](w io.Writer, f format, ms []M) error {
	if f != formatYAML {
		return printJSONList(w, ms)
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		parts[i] = string(b)
	}
	return writeYAML(w, []byte("["+strings.Join(parts, ",")+"]"))
}

func writeYAML(w io.Writer, js []byte) error {
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

// wrap breaks s at spaces into lines of at most width characters; a word
// longer than width keeps a line of its own, whole.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// reasonWidth is where the table wraps a reason; -o wide does not.
const reasonWidth = 72

// reasonLines are the lines of a REASONS or REASON cell: one reason a
// line, each wrapped in the table and whole in the wide table.
func reasonLines(reasons []string, f format) []string {
	var out []string
	for _, r := range reasons {
		if f == formatWide {
			out = append(out, r)
			continue
		}
		out = append(out, wrap(r, reasonWidth)...)
	}
	if len(out) == 0 {
		out = []string{"-"}
	}
	return out
}

// printRows writes a row whose last cell spans several lines: the first
// with the other cells, the rest under it alone.
func printRows(w io.Writer, indent string, cells []string, last []string) {
	fmt.Fprintf(w, "%s%s\t%s\n", indent, strings.Join(cells, "\t"), last[0])
	blank := strings.Repeat("\t", len(cells))
	for _, l := range last[1:] {
		fmt.Fprintf(w, "%s%s%s\n", indent, blank, l)
	}
}
