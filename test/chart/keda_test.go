package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// crdSchema is the part of a structural openAPIV3Schema the checks read.
type crdSchema struct {
	Type                 string                `json:"type"`
	Properties           map[string]*crdSchema `json:"properties"`
	Items                *crdSchema            `json:"items"`
	AdditionalProperties json.RawMessage       `json:"additionalProperties"`
	Required             []string              `json:"required"`
	Enum                 []any                 `json:"enum"`
	PreserveUnknown      bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool                  `json:"x-kubernetes-int-or-string"`
}

type crd struct {
	Spec struct {
		Names    struct{ Kind string } `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema *crdSchema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// crdModule is a Go module that ships CRDs as plain YAML: its directory
// in the module cache, and the CRD files, by the kinds they define, whose
// version the checks read.
type crdModule struct {
	path    string // module path, with @version when go.mod does not require it
	dir     string // the CRD files' directory in the module
	version string // the API version read
	group   string // the API group, apiVersion's prefix
	files   []string

	once    sync.Once
	modDir  string
	schemas map[string]*crdSchema // by kind
	err     error
}

// kedaModule is KEDA's module that go.mod already pins (for the
// ExternalScaler client): its CRDs say what KEDA accepts with no code.
// KEDA's typed API (github.com/kedacore/keda/v2/apis/keda/v1alpha1) would
// drag controller-runtime, client-go and KEDA's webhooks into go.mod.
var kedaModule = &crdModule{path: "github.com/kedacore/keda/v2", dir: "config/crd/bases", version: "v1alpha1", group: "keda.sh",
	files: []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"}}

// certManagerModule is cert-manager's published module at a release, for
// the CRDs of the first install's cert-manager recipe; it is downloaded to
// the module cache, not required by go.mod, and nothing of it is
// committed.
var certManagerModule = &crdModule{path: "github.com/cert-manager/cert-manager@v1.21.2", dir: "deploy/crds", version: "v1",
	group: "cert-manager.io", files: []string{"cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml"}}

// load downloads the module (`go mod download` fetches its files when no
// package of it was built yet) and reads its CRDs' schemas.
func (m *crdModule) load() (map[string]*crdSchema, error) {
	m.once.Do(func() {
		cmd := exec.Command("go", "mod", "download", "-json", m.path)
		cmd.Dir = repoRoot
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			m.err = fmt.Errorf("downloading %s: %w\n%s%s", m.path, err, out, stderr.String())
			return
		}
		var mod struct{ Dir, Error string }
		if err := json.Unmarshal(out, &mod); err != nil {
			m.err = fmt.Errorf("go mod download -json: %w", err)
			return
		}
		if mod.Error != "" || mod.Dir == "" {
			m.err = fmt.Errorf("downloading %s: %q, directory %q", m.path, mod.Error, mod.Dir)
			return
		}
		m.modDir, m.schemas = mod.Dir, map[string]*crdSchema{}
		for _, file := range m.files {
			data, err := os.ReadFile(filepath.Join(mod.Dir, m.dir, file))
			if err != nil {
				m.err = err
				return
			}
			var c crd
			if err := yaml.Unmarshal(data, &c); err != nil {
				m.err = fmt.Errorf("%s: %w", file, err)
				return
			}
			for _, v := range c.Spec.Versions {
				if v.Name == m.version {
					m.schemas[c.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
				}
			}
		}
	})
	return m.schemas, m.err
}

// crdFiles are the paths of the module's CRD files, for an API server.
func (m *crdModule) crdFiles() ([]string, error) {
	if _, err := m.load(); err != nil {
		return nil, err
	}
	out := make([]string, len(m.files))
	for i, f := range m.files {
		out[i] = filepath.Join(m.modDir, m.dir, f)
	}
	return out, nil
}

// kedaObject is a decoded custom object: its kind, metadata and body.
type kedaObject struct {
	kind string
	meta metav1.ObjectMeta
	body map[string]any
}

// decodeKEDA checks one keda.sh/v1alpha1 manifest against its CRD.
func decodeKEDA(doc []byte) (kedaObject, error) { return kedaModule.decode(doc) }

// decode checks one manifest of the module's group against its CRD: no
// field the schema lacks, every required field, types and enums as
// declared.
func (m *crdModule) decode(doc []byte) (kedaObject, error) {
	schemas, err := m.load()
	if err != nil {
		return kedaObject{}, err
	}
	var obj kedaObject
	if err := yaml.UnmarshalStrict(doc, &obj.body); err != nil {
		return obj, err
	}
	if want := m.group + "/" + m.version; obj.body["apiVersion"] != want {
		return obj, fmt.Errorf("apiVersion must be %s, got %v", want, obj.body["apiVersion"])
	}
	obj.kind, _ = obj.body["kind"].(string)
	schema, ok := schemas[obj.kind]
	if !ok {
		return obj, fmt.Errorf("kind %q is not a %s kind these checks know", obj.kind, m.group)
	}
	// metadata is `type: object` in every CRD; the API server reads it as
	// ObjectMeta, so decode it as one, strictly.
	meta, err := json.Marshal(obj.body["metadata"])
	if err != nil {
		return obj, err
	}
	if err := yaml.UnmarshalStrict(meta, &obj.meta); err != nil {
		return obj, fmt.Errorf("metadata: %w", err)
	}
	body := map[string]any{}
	for k, v := range obj.body {
		if k != "metadata" {
			body[k] = v
		}
	}
	if problems := schema.check("", body); len(problems) > 0 {
		return obj, fmt.Errorf("%s %s: %s", obj.kind, obj.meta.Name, strings.Join(problems, "; "))
	}
	return obj, nil
}

func (s *crdSchema) check(path string, v any) []string {
	if s.IntOrString {
		if _, isString := v.(string); isString || isInteger(v) {
			return nil
		}
		return []string{fmt.Sprintf("%s: must be an integer or a string, got %T", path, v)}
	}
	if len(s.Enum) > 0 && (!isScalar(v) || !slices.Contains(s.Enum, v)) {
		return []string{fmt.Sprintf("%s: must be one of %v, got %v", path, s.Enum, v)}
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: must be an object, got %T", path, v)}
		}
		return s.checkObject(path, m)
	case "array":
		items, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: must be a list, got %T", path, v)}
		}
		var problems []string
		for i, it := range items {
			if s.Items != nil {
				problems = append(problems, s.Items.check(fmt.Sprintf("%s[%d]", path, i), it)...)
			}
		}
		return problems
	case "string":
		if _, ok := v.(string); !ok {
			return []string{fmt.Sprintf("%s: must be a string, got %T (quote it)", path, v)}
		}
	case "integer":
		if !isInteger(v) {
			return []string{fmt.Sprintf("%s: must be an integer, got %v", path, v)}
		}
	case "number":
		if _, ok := v.(float64); !ok {
			return []string{fmt.Sprintf("%s: must be a number, got %T", path, v)}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return []string{fmt.Sprintf("%s: must be true or false, got %T", path, v)}
		}
	}
	return nil
}

func (s *crdSchema) checkObject(path string, m map[string]any) []string {
	var problems []string
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			problems = append(problems, fmt.Sprintf("%s.%s: is required", path, r))
		}
	}
	var additional *crdSchema
	if len(s.AdditionalProperties) > 0 && string(s.AdditionalProperties) != "false" && string(s.AdditionalProperties) != "true" {
		additional = &crdSchema{}
		if err := json.Unmarshal(s.AdditionalProperties, additional); err != nil {
			return append(problems, fmt.Sprintf("%s: schema additionalProperties: %v", path, err))
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sub := path + "." + k
		switch prop, ok := s.Properties[k]; {
		case ok:
			problems = append(problems, prop.check(sub, m[k])...)
		case additional != nil:
			problems = append(problems, additional.check(sub, m[k])...)
		case s.PreserveUnknown || string(s.AdditionalProperties) == "true":
		default:
			// The API server would prune it without a word.
			problems = append(problems, fmt.Sprintf("%s: unknown field", sub))
		}
	}
	return problems
}

func isScalar(v any) bool {
	switch v.(type) {
	case string, float64, bool:
		return true
	}
	return false
}

func isInteger(v any) bool {
	f, ok := v.(float64)
	return ok && f == math.Trunc(f)
}
