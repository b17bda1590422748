package doccheck

import (
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
)

// envYAML is the pelwarden the examples run against: the connections,
// liveness profiles and Kubernetes access an example may name.
//
//go:embed env.yaml
var envYAML []byte

var (
	envOnce sync.Once
	env     metadata.Env
	errEnv  error
)

// Env is what trigger examples are parsed against, from env.yaml.
func Env() (metadata.Env, error) {
	envOnce.Do(func() {
		cfg, err := loadConfig("doccheck/env.yaml", envYAML, nil)
		if err != nil {
			errEnv = fmt.Errorf("doccheck/env.yaml: %w", err)
			return
		}
		env = cfg.Env()
	})
	return env, errEnv
}

// Config loads a `yaml config` example through pelwarden's config loader,
// strictly, and validates it. A fragment without a redis section gets the
// connection named default (PELWARDEN_REDIS_ADDR), as a pelwarden started
// with --redis-addr has. Errors name lines of page: the example starts on
// line of it.
func Config(page string, line int, body string) error {
	var top map[string]any
	_ = yaml.Unmarshal([]byte(body), &top) // the loader reports what does not parse
	extra := map[string]string{}
	if _, ok := top["redis"]; !ok {
		extra["PELWARDEN_REDIS_ADDR"] = "127.0.0.1:6379"
	}
	// Blank lines before the body make the loader's line numbers the page's.
	_, err := loadConfig(page, []byte(strings.Repeat("\n", line)+body), extra)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		return err
	}
	var kept []*config.FieldError
	for _, p := range cerr.Problems {
		if !namesAbsentFile(p.Problem) {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &config.Error{Problems: kept}
}

// absentFile is how the loader quotes a file that does not exist.
var absentFile = regexp.MustCompile(`"(/[^"]+)": no such file or directory`)

// namesAbsentFile reports whether a problem is only that a file the
// example names by its absolute path (/etc/pelwarden/admin-token) is not
// on this machine: a fact of the reader's disk, not a mistake in the
// example. A relative path is one: pelwarden would not find it either.
func namesAbsentFile(problem string) bool {
	m := absentFile.FindStringSubmatch(problem)
	if m == nil {
		return false
	}
	_, err := os.Stat(m[1])
	return errors.Is(err, os.ErrNotExist)
}

// loadConfig runs config.Load on data as the file named file, with the
// PELWARDEN_* variables in vars. Passwords an example names by
// passwordEnv or passwordFile resolve to a stand-in.
func loadConfig(file string, data []byte, vars map[string]string) (config.Config, error) {
	return config.Load(config.Sources{
		Env: func(name string) (string, bool) {
			if name == config.EnvConfig {
				return file, true
			}
			if strings.HasPrefix(name, "PELWARDEN_") {
				v, ok := vars[name]
				return v, ok
			}
			return "example-password", true
		},
		ReadFile: func(path string) ([]byte, error) {
			if path == file {
				return data, nil
			}
			return []byte("example-password\n"), nil
		},
	}, nil)
}

// Metadata parses a `yaml metadata` example, a trigger's metadata map, as
// a trigger in namespace jobs: see Trigger. KEDA takes strings only, so an
// unquoted number or boolean is an error too.
func Metadata(body string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(body), &doc); err != nil {
		return err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return errors.New("a metadata example is one map of key: value")
	}
	m := doc.Content[0]
	for i := 1; i < len(m.Content); i += 2 {
		if v := m.Content[i]; v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			return fmt.Errorf("line %d: metadata %q: KEDA takes string values only; quote it", v.Line, m.Content[i-1].Value)
		}
	}
	var md map[string]string
	if err := m.Decode(&md); err != nil {
		return err
	}
	return Trigger(md, "jobs")
}

// kedaKeys are the metadata keys KEDA's external scaler reads itself
// (pkg/scalers/external_scaler.go) and forwards with the rest.
var kedaKeys = []string{"scalerAddress", "enableTLS", "unsafeSsl"}

// Trigger checks a trigger's metadata as pelwarden would take it from a
// ScaledObject in namespace: the metric keys parse, any hygiene keys are
// ones a trigger may set, and every key is one pelwarden or KEDA reads.
func Trigger(md map[string]string, namespace string) error {
	env, err := Env()
	if err != nil {
		return err
	}
	env.Namespace = namespace
	r, err := metadata.ParseTrigger(md, env)
	if err != nil {
		return err
	}
	if r.HygieneErr != nil {
		return fmt.Errorf("hygiene is turned off: %w", r.HygieneErr)
	}
	if _, err := metadata.Parse(md, env); err != nil {
		return err
	}
	if unread := unreadKeys(md, env); len(unread) > 0 {
		return fmt.Errorf("metadata %s: pelwarden does not read it (misspelled?); KEDA forwards every key, so it would be ignored", strings.Join(unread, ", "))
	}
	return nil
}

// unreadKeys lists the keys of md the parser does not read. The parser
// ignores keys it does not know (KEDA forwards every key), so a misspelled
// one would pass: a key whose value, made nonsense, changes neither the
// result nor the error is one it does not read.
func unreadKeys(md map[string]string, env metadata.Env) []string {
	want, wantErr := metadata.Parse(md, env)
	var unread []string
	for k := range md {
		if slices.Contains(kedaKeys, k) {
			continue
		}
		changed := maps.Clone(md)
		changed[k] = "\x00not a value of " + k
		got, gotErr := metadata.Parse(changed, env)
		if reflect.DeepEqual(want, got) && errorText(wantErr) == errorText(gotErr) {
			unread = append(unread, k)
		}
	}
	slices.Sort(unread)
	return unread
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
