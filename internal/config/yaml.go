package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxYAMLNodes bounds the nodes and keys visited in one file, counting each
// again every time an alias or merge key leads to it, so nested aliases cannot
// make loading take exponential time or report exponentially many problems.
// A config with a hundred connections visits under two thousand.
const maxYAMLNodes = 10_000

// decodeYAML decodes a config file onto cfg, leaving fields the file does not
// set as they are. Elements of the redis list start from DefaultRedis.
//
// Decoding is strict, like yaml.v3's KnownFields(true), but walks the node
// tree itself so that every problem names its config path (`redis[1].tls.caFile`)
// and line, and so that all problems are reported rather than the first.
func decodeYAML(file string, data []byte, cfg *Config, p *problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			p.add(file, "is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.add(file, "must hold one YAML document, found another at line %d", extra.Line)
		return
	case !errors.Is(err, io.EOF):
		p.add(file, "is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	w := &yamlWalker{file: file, p: p, budget: maxYAMLNodes}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	w.value(root, reflect.ValueOf(cfg).Elem(), "")
}

type yamlWalker struct {
	file   string
	p      *problems
	budget int
}

// where renders a node's position as file:line.
func (w *yamlWalker) where(n *yaml.Node) string {
	return fmt.Sprintf("%s:%d", w.file, n.Line)
}

// field names a path for a problem; the file itself stands for the root.
func (w *yamlWalker) field(path string) string {
	if path == "" {
		return w.file
	}
	return path
}

// spend takes one visit from the budget and reports whether any was left,
// reporting the overrun once.
func (w *yamlWalker) spend() bool {
	w.budget--
	if w.budget == -1 {
		w.p.add(w.field(""), "has more than %d YAML nodes once aliases are expanded", maxYAMLNodes)
	}
	return w.budget >= 0
}

// resolve follows aliases, spending budget; it returns nil once the budget
// is gone.
func (w *yamlWalker) resolve(n *yaml.Node) *yaml.Node {
	for {
		if !w.spend() {
			return nil
		}
		if n.Kind != yaml.AliasNode || n.Alias == nil {
			return n
		}
		n = n.Alias
	}
}

func (w *yamlWalker) value(n *yaml.Node, v reflect.Value, path string) {
	if n = w.resolve(n); n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	switch {
	case v.Kind() == reflect.Struct:
		w.mapping(n, v, path)
	case v.Kind() == reflect.Slice:
		w.sequence(n, v, path)
	case v.Kind() == reflect.Map:
		w.stringMap(n, v, path)
	default:
		w.scalar(n, v, path)
	}
}

func (w *yamlWalker) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		w.p.add(w.field(path), "must be a list, got %s (%s)", kindName(n), w.where(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		elem := out.Index(i)
		if r, ok := elem.Addr().Interface().(*Redis); ok {
			*r = DefaultRedis("", "")
		}
		w.value(item, elem, fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(out)
}

func (w *yamlWalker) mapping(n *yaml.Node, v reflect.Value, path string) {
	keys := yamlKeys(v.Type())
	if n.Kind != yaml.MappingNode {
		w.p.add(w.field(path), "must be a mapping with keys %s, got %s (%s)",
			strings.Join(keys.names, ", "), kindName(n), w.where(n))
		return
	}
	// Merge keys (<<: *anchor) first, so keys written here override them.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag == "!!merge" {
			w.merge(n.Content[i+1], v, path)
		}
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Tag == "!!merge" {
			continue
		}
		if !w.spend() {
			return
		}
		sub := keyPath(path, key.Value)
		if key.Kind != yaml.ScalarNode {
			w.p.add(w.field(path), "keys must be plain names, got %s (%s)", kindName(key), w.where(key))
			continue
		}
		if line, dup := seen[key.Value]; dup {
			w.p.add(sub, "is set twice, at lines %d and %d", line, key.Line)
			continue
		}
		seen[key.Value] = key.Line
		idx, known := keys.index[key.Value]
		if !known {
			hint := ""
			if v.Type() == reflect.TypeFor[Redis]() && key.Value == "password" {
				hint = "; a password is never read from YAML text, set passwordEnv or passwordFile"
			}
			w.p.add(sub, "unknown key (%s); accepted keys: %s%s", w.where(key), strings.Join(keys.names, ", "), hint)
			continue
		}
		w.value(val, v.Field(idx), sub)
	}
}

// merge applies the mapping, or list of mappings, of a merge key. In a list
// an earlier mapping wins, so they are applied last to first.
func (w *yamlWalker) merge(n *yaml.Node, v reflect.Value, path string) {
	if n = w.resolve(n); n == nil {
		return
	}
	if n.Kind == yaml.SequenceNode {
		for i := len(n.Content) - 1; i >= 0; i-- {
			w.merge(n.Content[i], v, path)
		}
		return
	}
	w.mapping(n, v, path)
}

func (w *yamlWalker) scalar(n *yaml.Node, v reflect.Value, path string) {
	want := scalarName(v.Type())
	if n.Kind != yaml.ScalarNode {
		w.p.add(w.field(path), "must be %s, got %s (%s)", want, kindName(n), w.where(n))
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		w.p.add(w.field(path), "must be %s, got %q (%s)", want, n.Value, w.where(n))
	}
}

// keyPath appends a key to a path, quoting a key that is not a plain name so
// that an empty or odd key still shows in the message.
func keyPath(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// keyIndex maps the YAML keys of a struct to its field indexes.
type keyIndex struct {
	names []string
	index map[string]int
}

func yamlKeys(t reflect.Type) keyIndex {
	k := keyIndex{index: make(map[string]int)}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		k.names = append(k.names, name)
		k.index[name] = i
	}
	return k
}

func scalarName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return `a duration such as "2s", "500ms" or "10m"`
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		return "an integer"
	default:
		return "a string"
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	default:
		return "an alias"
	}
}

// stringMap decodes a mapping of plain keys to scalar values, such as a
// hygiene target's metadata; values are kept as written.
func (w *yamlWalker) stringMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		w.p.add(w.field(path), "must be a mapping of keys to values, got %s (%s)", kindName(n), w.where(n))
		return
	}
	out := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], w.resolve(n.Content[i+1])
		if !w.spend() {
			return
		}
		sub := keyPath(path, key.Value)
		switch {
		case key.Kind != yaml.ScalarNode:
			w.p.add(w.field(path), "keys must be plain names, got %s (%s)", kindName(key), w.where(key))
		case out.MapIndex(reflect.ValueOf(key.Value)).IsValid():
			w.p.add(sub, "is set twice (%s)", w.where(key))
		case val == nil || val.Kind != yaml.ScalarNode:
			w.p.add(sub, "must be a single value (%s)", w.where(key))
		default:
			out.SetMapIndex(reflect.ValueOf(key.Value), reflect.ValueOf(val.Value))
		}
	}
	v.Set(out)
}
