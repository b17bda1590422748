package chart

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// schemaNode is the part of values.schema.json the table is checked against.
type schemaNode struct {
	Ref        string                 `json:"$ref"`
	Type       any                    `json:"type"`
	Properties map[string]*schemaNode `json:"properties"`
	Items      *schemaNode            `json:"items"`
	AllOf      []*schemaNode          `json:"allOf"`
}

type valuesSchema struct {
	schemaNode
	Definitions map[string]*schemaNode `json:"definitions"`
}

// refTypes names the definitions the table calls by their own name.
var refTypes = map[string]string{"duration": "duration", "stringMap": "map", "intOrString": "int or string"}

func (s *valuesSchema) resolve(n *schemaNode) (*schemaNode, string) {
	if n.Ref == "" {
		return n, ""
	}
	name := strings.TrimPrefix(n.Ref, "#/definitions/")
	return s.Definitions[name], refTypes[name]
}

// typeName is the type column for a schema node.
func (s *valuesSchema) typeName(n *schemaNode) string {
	r, named := s.resolve(n)
	if named != "" {
		return named
	}
	short := map[string]string{"integer": "int", "number": "number", "boolean": "bool", "array": "list", "object": "object", "string": "string"}
	switch t := r.Type.(type) {
	case string:
		return short[t]
	case []any:
		var parts []string
		for _, p := range t {
			parts = append(parts, short[p.(string)])
		}
		return strings.Join(parts, " or ")
	}
	if len(r.AllOf) > 0 {
		return s.typeName(r.AllOf[0])
	}
	return ""
}

// docRow is what the table must say of one key; a nil value means the key
// is not in values.yaml and its default is not checked.
type docRow struct {
	typ   string
	value any
}

// expectedRows walks values.yaml and the schema together: keys whose
// schema lists properties are expanded, anything else (a free-form object,
// a list) is one row with its whole default.
func (s *valuesSchema) expectedRows(prefix string, n *schemaNode, value any, hasValue bool, rows map[string]docRow) {
	r, _ := s.resolve(n)
	m, isMap := value.(map[string]any)
	if len(r.Properties) > 0 && (isMap || !hasValue) {
		for key, sub := range r.Properties {
			if key == "global" {
				continue
			}
			v, ok := m[key]
			s.expectedRows(prefix+key+".", sub, v, ok && hasValue, rows)
		}
		return
	}
	row := docRow{typ: s.typeName(n)}
	if hasValue {
		row.value = value
	}
	rows[strings.TrimSuffix(prefix, ".")] = row
	if r.Items != nil {
		if item, _ := s.resolve(r.Items); len(item.Properties) > 0 {
			s.expectedRows(strings.TrimSuffix(prefix, ".")+"[].", r.Items, nil, false, rows)
		}
	}
}

// The values table in charts/pelwarden/README.md must list every value with
// its type and default, and nothing that is not a value.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	t.Parallel()
	schemaJSON, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	require.NoError(t, err)
	var schema valuesSchema
	require.NoError(t, json.Unmarshal(schemaJSON, &schema))
	valuesYAML, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	var values map[string]any
	require.NoError(t, yaml.Unmarshal(valuesYAML, &values))
	want := map[string]docRow{}
	schema.expectedRows("", &schema.schemaNode, values, true, want)

	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		require.Len(t, cells, 6, "a values row has four cells: %s", line)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		key, typ, def, desc := strings.Trim(cells[1], "`"), cells[2], strings.Trim(cells[3], "`"), cells[4]
		require.NotEmpty(t, desc, "README row %s needs a description", key)
		require.False(t, documented[key], "README lists %s twice", key)
		documented[key] = true
		row, ok := want[key]
		require.True(t, ok, "README lists %s, which is neither in values.yaml nor in values.schema.json", key)
		require.Equal(t, row.typ, typ, "README type of %s should match values.schema.json", key)
		if row.value != nil {
			require.Equal(t, compactJSON(t, row.value), def, "README default of %s should match values.yaml", key)
		}
	}
	var missing []string
	for key := range want {
		if !documented[key] {
			missing = append(missing, key)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "README should document every value")
}

func compactJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return strings.TrimSpace(buf.String())
}
