package docgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/pelwarden/pelwarden/internal/config"
)

// configKey is one key of the config file.
type configKey struct {
	path, typ, def, doc string
}

// Configuration is docs/reference/configuration.md: every key of the
// config file, section by section, from config.Config's yaml tags, the
// defaults Load starts from (config.Default, config.DefaultRedis for each
// connection), the variables and flags of config.SettingRefs, and the
// fields' doc comments in root/internal/config.
func Configuration(root string) (Page, error) {
	docs, err := fieldDocs(filepath.Join(root, "internal", "config"))
	if err != nil {
		return Page{}, err
	}
	return page("docs/reference/configuration.md", "internal/config", func(b *bytes.Buffer) error { return writeConfig(docs, b) })
}

func writeConfig(docs map[string]string, b *bytes.Buffer) error {
	sets := map[string][]config.SettingRef{}
	used := map[string]bool{}
	for _, s := range config.SettingRefs() {
		p := strings.Replace(s.Path, "redis[default].", "redis[].", 1)
		sets[p] = append(sets[p], s)
	}
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Every key of pelwarden's YAML configuration file (`--config`, or `PELWARDEN_CONFIG`), with its type, its default, ")
	b.WriteString("the `PELWARDEN_*` variable and the flag that set it, and what it does. Each layer overrides the one before: ")
	b.WriteString("defaults, the file, variables, flags. The `PELWARDEN_REDIS_*` variables and `--redis-*` flags set the connection ")
	b.WriteString("named `default`, creating it when the file has none. Durations are Go durations such as `500ms`, `2s` or `10m`.\n")
	cfg := config.Default()
	v := reflect.ValueOf(cfg)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name := yamlName(f)
		fmt.Fprintf(b, "\n## %s\n\n", name)
		if d := docs["Config."+f.Name]; d != "" {
			b.WriteString(sentence(d, f.Name, name) + "\n\n")
		}
		header(b, "key", "type", "default", "variable / flag", "description")
		keys := walk(docs, name, f, v.Field(i))
		for _, k := range keys {
			var envs []string
			for _, s := range sets[k.path] {
				used[s.Path] = true
				envs = append(envs, settingCell(s))
			}
			if len(envs) == 0 && k.typ != "object" {
				envs = []string{"none"}
			}
			row(b, code(k.path), k.typ, k.def, strings.Join(envs, "<br>"), k.doc)
		}
	}
	return writeUnmatched(b, used)
}

// writeUnmatched lists the variables and flags that set no file key (the
// default connection's passwords, the config file's path), and fails on
// any other: a setting whose path names no key is a typo.
func writeUnmatched(b *bytes.Buffer, used map[string]bool) error {
	b.WriteString("\n## Variables and flags without a file key\n\n")
	header(b, "variable / flag", "sets")
	for _, s := range config.SettingRefs() {
		if used[s.Path] {
			continue
		}
		what := ""
		switch {
		case s.Path == "":
			what = "the path of the configuration file"
		case strings.HasSuffix(s.Path, ".password"):
			what = "the password itself, of " + code(strings.TrimSuffix(s.Path, ".password")) + "; in the file, " +
				code(strings.Replace(s.Path, "redis[default].", "redis[].", 1)+"Env") + " names a variable that holds it"
		case strings.HasSuffix(s.Path, ".passwordFile"):
			what = code(strings.Replace(s.Path, "redis[default].", "redis[].", 1)) + " of the connection named default"
		default:
			return fmt.Errorf("setting %s (%s) names no key of the config file", s.Path, s.Env)
		}
		row(b, settingCell(s), what)
	}
	return nil
}

func settingCell(s config.SettingRef) string {
	out := code(s.Env)
	if s.Flag != "" {
		out += "<br>" + code("--"+s.Flag)
	}
	if strings.HasPrefix(s.Path, "redis[default].") {
		out += " (connection `default`)"
	}
	return out
}

// walk lists the key of field f, whose value is v, and the keys under it.
// Elements of a list of objects are described from their defaults: a
// connection's from config.DefaultRedis, others' from their zero value.
func walk(docs map[string]string, path string, f reflect.StructField, v reflect.Value) []configKey {
	owner := f.Type
	if owner.Kind() == reflect.Slice {
		owner = owner.Elem()
	}
	switch {
	case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]():
		return fields(docs, path, v)
	case f.Type.Kind() == reflect.Slice && owner.Kind() == reflect.Struct:
		elem := reflect.New(owner).Elem()
		if owner == reflect.TypeFor[config.Redis]() {
			elem = reflect.ValueOf(config.DefaultRedis("", ""))
		}
		return fields(docs, path+"[]", elem)
	}
	return nil
}

// fields lists the keys of the struct v, at path.
func fields(docs map[string]string, path string, v reflect.Value) []configKey {
	var keys []configKey
	t := v.Type()
	last := ""
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "-" || !f.IsExported() {
			continue
		}
		p := path + "." + name
		d, ok := docs[t.Name()+"."+f.Name]
		if !ok {
			// A field without a comment of its own shares the one above
			// it (APIQPS and APIBurst).
			d = last
		}
		last = d
		sub := walk(docs, p, f, v.Field(i))
		k := configKey{path: p, typ: typeName(f.Type), def: defaultText(v.Field(i)), doc: sentence(d, f.Name, name)}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			k.def = ""
		}
		keys = append(keys, k)
		keys = append(keys, sub...)
	}
	return keys
}

// yamlName is the key of f in the config file.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t.Kind() == reflect.Struct:
		return "object"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return "list of objects"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem())
	}
	return t.Kind().String()
}

// defaultText renders a default value as it would be written in the file.
func defaultText(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		d := time.Duration(v.Int())
		if d == 0 {
			return "none"
		}
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		return code(s)
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return "none"
		}
		return code(strconv.Quote(v.String()))
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
		return code(flowYAML(v.Interface()))
	}
	return code(fmt.Sprint(v.Interface()))
}

// flowYAML writes v on one line, in YAML's flow style.
func flowYAML(v any) string {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	var flow func(*yaml.Node)
	flow = func(n *yaml.Node) {
		n.Style |= yaml.FlowStyle
		if n.Kind == yaml.MappingNode {
			// Empty lists and maps say nothing: they are the zero value.
			var kept []*yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if v := n.Content[i+1]; (v.Kind != yaml.SequenceNode && v.Kind != yaml.MappingNode) || len(v.Content) > 0 {
					kept = append(kept, n.Content[i], v)
				}
			}
			n.Content = kept
		}
		for _, c := range n.Content {
			flow(c)
		}
	}
	flow(&n)
	out, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(out))
}

// sentence is a field's doc comment with the Go field name it starts with
// replaced by the key.
func sentence(d, field, key string) string {
	d = strings.Join(strings.Fields(d), " ")
	if rest, ok := strings.CutPrefix(d, field+" "); ok {
		return code(key) + " " + rest
	}
	return d
}

// fieldDocs reads the doc comments of the struct fields of the package in
// dir, keyed Type.Field.
func fieldDocs(dir string) (map[string]string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				for _, f := range st.Fields.List {
					for _, id := range f.Names {
						if f.Doc != nil {
							docs[ts.Name.Name+"."+id.Name] = f.Doc.Text()
						}
					}
				}
			}
			return false
		})
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no documented struct fields in %s", dir)
	}
	return docs, nil
}
