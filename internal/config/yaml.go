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
	"sync"

	"gopkg.in/yaml.v3"
)

// decodeYAML decodes a config file onto cfg, leaving fields the file does not
// set as they are. Elements of the redis list start from DefaultRedis.
//
// yaml.v3 does the decoding: KnownFields(true) refuses unknown keys, it
// refuses a key set twice, resolves merge keys, and gives up on a document
// whose aliases expand too far ("excessive aliasing"), so nested aliases
// cannot make loading exponential. Its *yaml.TypeError lists every problem
// with a line number; each is reported under the config path
// (`redis[1].tls.caFile`) that the parsed document has at that line.
func decodeYAML(file string, data []byte, cfg *Config, p *problems) {
	doc, ok := parseDocument(file, data, p)
	if !ok {
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	var typeErr *yaml.TypeError
	switch {
	case errors.As(err, &typeErr):
		spots := locate(doc)
		seen := make(map[string]bool)
		for _, msg := range typeErr.Errors {
			if !seen[msg] { // an alias repeats its anchor's problems
				seen[msg] = true
				spots.report(file, msg, p)
			}
		}
		return
	case err != nil:
		p.add(file, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	// yaml.v3 starts list elements from zero values; decode the redis list
	// again onto defaults. The strict pass above has checked it already.
	var conns struct {
		Redis []redisWithDefaults `yaml:"redis"`
	}
	if err := doc.Decode(&conns); err != nil {
		p.add(file, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	if conns.Redis != nil {
		cfg.Redis = make([]Redis, len(conns.Redis))
		for i, r := range conns.Redis {
			cfg.Redis[i] = Redis(r)
		}
	}
}

// redisWithDefaults is a Redis that decodes onto DefaultRedis.
type redisWithDefaults Redis

func (r *redisWithDefaults) UnmarshalYAML(n *yaml.Node) error {
	*r = redisWithDefaults(DefaultRedis("", ""))
	return n.Decode((*Redis)(r))
}

// parseDocument parses data into a node tree, which must hold at most one
// document. It reports false when there is nothing to decode.
func parseDocument(file string, data []byte, p *problems) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			p.add(file, "is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, false
	}
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.add(file, "must hold one YAML document, found another at line %d", extra.Line)
		return nil, false
	case !errors.Is(err, io.EOF):
		p.add(file, "is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, false
	}
	return &doc, true
}

// The problems yaml.v3 lists in a *yaml.TypeError, one a string.
var (
	unknownKey   = regexp.MustCompile(`(?s)^line (\d+): field (.*) not found in type (\S+)$`)
	wrongType    = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
	duplicateKey = regexp.MustCompile(`(?s)^line (\d+): mapping key (".*") already defined at line (\d+)$`)
)

// spot is a node of the document with the config path it sits at and the
// Go type it decodes into, as yaml.v3 names types in errors ("<nil>" under
// an unknown key).
type spot struct {
	node *yaml.Node
	// path is the config path; for a key, the path the key names.
	path string
	// parent is the path of the mapping a key is in; empty for values.
	parent string
	key    bool
	typ    string
}

// spots indexes the document's nodes by line. Aliases are not followed: a
// problem inside an anchor is reported where the anchor is written.
type spots map[int][]spot

func locate(doc *yaml.Node) spots {
	s := spots{}
	var walk func(n *yaml.Node, path string, t reflect.Type)
	walk = func(n *yaml.Node, path string, t reflect.Type) {
		s[n.Line] = append(s[n.Line], spot{node: n, path: path, typ: fmt.Sprint(t)})
		switch n.Kind {
		case yaml.SequenceNode:
			var item reflect.Type
			if t != nil && t.Kind() == reflect.Slice {
				item = t.Elem()
			}
			for i, v := range n.Content {
				walk(v, fmt.Sprintf("%s[%d]", path, i), item)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key, val := n.Content[i], n.Content[i+1]
				if key.ShortTag() == "!!merge" { // merged keys belong to this mapping
					merged := []*yaml.Node{val}
					if val.Kind == yaml.SequenceNode {
						merged = val.Content
					}
					for _, m := range merged {
						walk(m, path, t)
					}
					continue
				}
				sub := keyPath(path, key.Value)
				// Keys decode into strings: struct field names, and the keys
				// of the only maps a Config has.
				s[key.Line] = append(s[key.Line], spot{node: key, path: sub, parent: path, key: true, typ: "string"})
				walk(val, sub, fieldType(t, key.Value))
			}
		}
	}
	if len(doc.Content) == 1 {
		walk(doc.Content[0], "", reflect.TypeFor[Config]())
	}
	return s
}

// fieldType is the type of the value under key in a struct or map, or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	switch {
	case t == nil:
		return nil
	case t.Kind() == reflect.Map:
		return t.Elem()
	case t.Kind() != reflect.Struct:
		return nil
	}
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return f.Type
		}
	}
	return nil
}

// report adds one yaml.v3 problem, naming the config path at its line.
func (s spots) report(file, msg string, p *problems) {
	if m := unknownKey.FindStringSubmatch(msg); m != nil {
		s.unknownKey(file, atoi(m[1]), m[2], m[3], p)
		return
	}
	if m := wrongType.FindStringSubmatch(msg); m != nil {
		if s.wrongType(file, atoi(m[1]), m[2], m[3], m[4], p) {
			return
		}
	}
	if m := duplicateKey.FindStringSubmatch(msg); m != nil {
		name, _ := strconv.Unquote(m[2])
		at := s.find(atoi(m[1]), func(sp spot) bool { return sp.key && sp.node.Value == name })
		p.add(field(file, at.path), "is set twice, at lines %s and %s", m[3], m[1])
		return
	}
	p.add(file, "%s", msg)
}

// unknownKey reports a key that the struct type typ has no field for.
func (s spots) unknownKey(file string, line int, name, typ string, p *problems) {
	hint := ""
	if typ == reflect.TypeFor[Redis]().String() && name == "password" {
		hint = "; a password is never read from YAML text, set passwordEnv or passwordFile"
	}
	at := s.find(line, func(sp spot) bool { return sp.key && sp.node.Value == name })
	p.add(field(file, at.path), "unknown key (%s:%d); accepted keys: %s%s",
		file, line, strings.Join(structKeys()[typ], ", "), hint)
}

// wrongType reports a value, shown as yaml.v3 abbreviates it, that does not
// decode into typ. It reports false when no node at line fits.
func (s spots) wrongType(file string, line int, tag, shown, typ string, p *problems) bool {
	same := func(sp spot) bool {
		return sp.node.ShortTag() == tag && (sp.node.Kind != yaml.ScalarNode || abbreviate(sp.node.Value) == shown)
	}
	// A nested mapping can start on its parent's line: the Go type tells
	// them apart, unless the node is an anchor under an unknown key.
	at := s.find(line, func(sp spot) bool { return sp.typ == typ && same(sp) })
	if at.node == nil {
		at = s.find(line, same)
	}
	switch {
	case at.node == nil:
		return false
	case at.key:
		p.add(field(file, at.parent), "keys must be plain names, got %s (%s:%d)", kindName(at.node), file, line)
	default:
		p.add(field(file, at.path), "must be %s, got %s (%s:%d)", describe(typ), kindName(at.node), file, line)
	}
	return true
}

// find returns the first spot at line that match accepts, or a zero spot.
func (s spots) find(line int, match func(spot) bool) spot {
	for _, sp := range s[line] {
		if match(sp) {
			return sp
		}
	}
	return spot{}
}

// abbreviate shortens a value the way yaml.v3 quotes it in a TypeError.
func abbreviate(v string) string {
	if len(v) > 10 {
		return v[:7] + "..."
	}
	return v
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// field names a path for a problem; the file itself stands for the root.
func field(file, path string) string {
	if path == "" {
		return file
	}
	return path
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

// describe says what a Go type, as yaml.v3 names it, accepts.
func describe(typ string) string {
	switch typ {
	case "time.Duration":
		return `a duration such as "2s", "500ms" or "10m"`
	case "bool":
		return "true or false"
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "map[string]string":
		return "a mapping of keys to values"
	}
	if keys, ok := structKeys()[typ]; ok {
		return "a mapping with keys " + strings.Join(keys, ", ")
	}
	if strings.HasPrefix(typ, "[]") {
		return "a list"
	}
	return typ
}

// structKeys maps each struct type of Config, named as yaml.v3 names it in
// errors (config.RedisTLS), to its YAML keys in declaration order.
var structKeys = sync.OnceValue(func() map[string][]string {
	out := make(map[string][]string)
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Slice, reflect.Map:
			add(t.Elem())
		case reflect.Struct:
			var keys []string
			for f := range t.Fields() {
				name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
				if name != "" && name != "-" {
					keys = append(keys, name)
					add(f.Type)
				}
			}
			out[t.String()] = keys
		}
	}
	add(reflect.TypeFor[Config]())
	return out
})

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}
