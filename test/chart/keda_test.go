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

// KEDA's typed API (github.com/kedacore/keda/v2/apis/keda/v1alpha1) drags
// controller-runtime, client-go and KEDA's webhooks into go.mod. KEDA's
// own CRDs say the same thing with no code: they ship in the keda module
// that go.mod already pins (for the ExternalScaler client), and KEDA
// objects are checked against their openAPIV3Schema here.

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

var (
	kedaOnce    sync.Once
	kedaSchemas map[string]*crdSchema // by kind, for keda.sh/v1alpha1
	kedaErr     error
)

// kedaCRDs reads ScaledObject and TriggerAuthentication from the keda
// module go.mod requires.
func kedaCRDs() (map[string]*crdSchema, error) {
	kedaOnce.Do(func() {
		// `go mod download` fetches the module's files when no package of it
		// was built yet (go list -m would print no directory then).
		cmd := exec.Command("go", "mod", "download", "-json", "github.com/kedacore/keda/v2")
		cmd.Dir = repoRoot
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kedaErr = fmt.Errorf("downloading the keda module: %w\n%s%s", err, out, stderr.String())
			return
		}
		var mod struct{ Dir, Error string }
		if err := json.Unmarshal(out, &mod); err != nil {
			kedaErr = fmt.Errorf("go mod download -json: %w", err)
			return
		}
		if mod.Error != "" || mod.Dir == "" {
			kedaErr = fmt.Errorf("downloading the keda module: %q, directory %q", mod.Error, mod.Dir)
			return
		}
		kedaSchemas = map[string]*crdSchema{}
		for _, file := range []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"} {
			data, err := os.ReadFile(filepath.Join(mod.Dir, "config", "crd", "bases", file))
			if err != nil {
				kedaErr = err
				return
			}
			var c crd
			if err := yaml.Unmarshal(data, &c); err != nil {
				kedaErr = fmt.Errorf("%s: %w", file, err)
				return
			}
			for _, v := range c.Spec.Versions {
				if v.Name == "v1alpha1" {
					kedaSchemas[c.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
				}
			}
		}
	})
	return kedaSchemas, kedaErr
}

// kedaObject is a decoded KEDA manifest: its kind, metadata and body.
type kedaObject struct {
	kind string
	meta metav1.ObjectMeta
	body map[string]any
}

// decodeKEDA checks one keda.sh/v1alpha1 manifest against its CRD: no field
// the schema lacks, every required field, types and enums as declared.
func decodeKEDA(doc []byte) (kedaObject, error) {
	schemas, err := kedaCRDs()
	if err != nil {
		return kedaObject{}, err
	}
	var obj kedaObject
	if err := yaml.UnmarshalStrict(doc, &obj.body); err != nil {
		return obj, err
	}
	if obj.body["apiVersion"] != "keda.sh/v1alpha1" {
		return obj, fmt.Errorf("apiVersion must be keda.sh/v1alpha1, got %v", obj.body["apiVersion"])
	}
	obj.kind, _ = obj.body["kind"].(string)
	schema, ok := schemas[obj.kind]
	if !ok {
		return obj, fmt.Errorf("kind %q is not a KEDA kind these checks know", obj.kind)
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
