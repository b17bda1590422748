package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pelwarden/pelwarden/internal/metadata"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// checkedTrigger is one trigger to check: its name in the output, its
// namespace and metadata.
type checkedTrigger struct {
	name      string
	fromFile  bool
	namespace string
	metadata  map[string]string
}

func (t checkedTrigger) request() *pelwardenv1.CheckTriggerRequest {
	return &pelwardenv1.CheckTriggerRequest{Namespace: t.namespace, Metadata: t.metadata}
}

// pelwardenTypes are the trigger types that reach an external scaler.
var pelwardenTypes = []string{"external", "external-push"}

// triggers are the triggers the flags name: a file's, or one from
// --metadata or --metadata-json.
func (f checkTriggerFlags) triggers() ([]checkedTrigger, error) {
	given := 0
	for _, set := range []bool{f.file != "", len(f.metadata) > 0, f.metadataJSON != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, errors.New("name the trigger with exactly one of -f FILE, --metadata KEY=VALUE (repeated) and --metadata-json JSON")
	}
	if f.file != "" {
		return fileTriggers(f.file, f.namespace)
	}
	md, err := f.flagMetadata()
	if err != nil {
		return nil, err
	}
	return []checkedTrigger{{name: "trigger", namespace: f.namespace, metadata: md}}, nil
}

// flagMetadata reads --metadata pairs or --metadata-json.
func (f checkTriggerFlags) flagMetadata() (map[string]string, error) {
	md := map[string]string{}
	if f.metadataJSON != "" {
		dec := json.NewDecoder(strings.NewReader(f.metadataJSON))
		if err := dec.Decode(&md); err != nil {
			return nil, fmt.Errorf(`--metadata-json must be a JSON object of strings, {"stream":"jobs",...}: %w`, err)
		}
		return md, nil
	}
	for _, pair := range f.metadata {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("--metadata %q: must be key=value, one pair a flag", pair)
		}
		if other := pairListKey(value); other != "" {
			return nil, fmt.Errorf("--metadata %q: the value of %s holds %q: give each key its own --metadata (a value may hold commas, so a list is not split)", pair, key, other+"=")
		}
		if _, dup := md[key]; dup {
			return nil, fmt.Errorf("--metadata: key %s given twice", key)
		}
		md[key] = value
	}
	return md, nil
}

// pairListKey is the metadata key a value holds after a comma, as in the
// old comma-separated form "stream=jobs,consumerGroup=workers"; "" when
// it holds none.
func pairListKey(value string) string {
	for _, part := range strings.Split(value, ",")[1:] {
		if k, _, ok := strings.Cut(part, "="); ok && slices.ContainsFunc(metadata.Keys, func(key metadata.Key) bool { return key.Name == k }) {
			return k
		}
	}
	return ""
}

// kubeObject is the part of a ScaledObject or ScaledJob check-trigger
// reads.
type kubeObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Triggers []struct {
			Type     string            `yaml:"type"`
			Name     string            `yaml:"name"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

// fileTriggers reads every trigger of type external or external-push of
// the ScaledObjects and ScaledJobs in path; namespace, when set, stands
// for theirs.
func fileTriggers(path, namespace string) ([]checkedTrigger, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the file the user names
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []checkedTrigger
	for doc := 1; ; doc++ {
		var obj kubeObject
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("-f %s, document %d: %w", path, doc, err)
		}
		if obj.Kind != "ScaledObject" && obj.Kind != "ScaledJob" {
			continue
		}
		ns := namespace
		if ns == "" {
			ns = obj.Metadata.Namespace
		}
		if ns == "" {
			return nil, fmt.Errorf("-f %s: %s %s has no metadata.namespace; pass --namespace", path, obj.Kind, obj.Metadata.Name)
		}
		for i, tr := range obj.Spec.Triggers {
			if !slices.Contains(pelwardenTypes, tr.Type) {
				continue
			}
			name := fmt.Sprintf("%s %s/%s trigger %d (%s)", obj.Kind, ns, obj.Metadata.Name, i, tr.Type)
			if tr.Name != "" {
				name = fmt.Sprintf("%s %s/%s trigger %s (%s)", obj.Kind, ns, obj.Metadata.Name, tr.Name, tr.Type)
			}
			out = append(out, checkedTrigger{name: name, fromFile: true, namespace: ns, metadata: tr.Metadata})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-f %s: no ScaledObject or ScaledJob trigger of type %s", path, strings.Join(pelwardenTypes, " or "))
	}
	return out, nil
}
