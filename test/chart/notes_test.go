package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// kedaTLSParams are the auth parameters KEDA's external scaler reads
// (pkg/scalers/external_scaler.go in kedacore/keda).
var kedaTLSParams = []string{"caCert", "tlsClientCert", "tlsClientKey"}

// kedaDocs decodes every document of a YAML stream as a KEDA object.
func kedaDocs(stream string) ([]kedaObject, error) {
	docs, err := splitDocuments(stream)
	if err != nil {
		return nil, err
	}
	var objs []kedaObject
	for i, doc := range docs {
		obj, err := decodeKEDA(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// trigger is one ScaledObject trigger, as the CRD check left it.
type trigger struct {
	typ      string
	authRef  string
	metadata map[string]string
}

func triggers(so kedaObject) []trigger {
	spec, _ := so.body["spec"].(map[string]any)
	list, _ := spec["triggers"].([]any)
	out := make([]trigger, 0, len(list))
	for _, raw := range list {
		m, _ := raw.(map[string]any)
		tr := trigger{metadata: map[string]string{}}
		tr.typ, _ = m["type"].(string)
		if ref, ok := m["authenticationRef"].(map[string]any); ok {
			tr.authRef, _ = ref["name"].(string)
		}
		md, _ := m["metadata"].(map[string]any)
		for k, v := range md {
			tr.metadata[k], _ = v.(string) // the CRD check made them strings
		}
		out = append(out, tr)
	}
	return out
}

// authParams lists a TriggerAuthentication's secretTargetRef parameters.
func authParams(ta kedaObject) []string {
	spec, _ := ta.body["spec"].(map[string]any)
	refs, _ := spec["secretTargetRef"].([]any)
	var params []string
	for _, r := range refs {
		m, _ := r.(map[string]any)
		p, _ := m["parameter"].(string)
		params = append(params, p)
	}
	slices.Sort(params)
	return params
}

func byKind(objs []kedaObject, kind string) []kedaObject {
	var out []kedaObject
	for _, o := range objs {
		if o.kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// The CRD check is what makes the NOTES and examples tests meaningful: it
// must fail on what KEDA would prune or refuse.
func TestKEDACheckRejectsWhatKEDAWouldNot(t *testing.T) {
	t.Parallel()
	const scaled = `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: worker
spec:
  scaleTargetRef:
    name: worker
  triggers:
    - type: external
      metadata:
        scalerAddress: pelwarden.pelwarden.svc.cluster.local:9090
        pendingEntriesCount: "5"
`
	for name, tc := range map[string]struct {
		manifest string
		problem  string
	}{
		"a valid ScaledObject passes": {manifest: scaled},
		"an unknown spec field": {
			manifest: strings.Replace(scaled, "  triggers:", "  minReplicas: 0\n  triggers:", 1),
			problem:  ".spec.minReplicas: unknown field",
		},
		"an unquoted metadata number": {
			manifest: strings.Replace(scaled, `"5"`, "5", 1),
			problem:  "pendingEntriesCount: must be a string",
		},
		"a missing required field": {
			manifest: strings.Replace(scaled, "  scaleTargetRef:\n    name: worker\n", "", 1),
			problem:  ".spec.scaleTargetRef: is required",
		},
		"an unknown metadata field": {
			manifest: strings.Replace(scaled, "  name: worker\nspec", "  name: worker\n  labelz: {}\nspec", 1),
			problem:  `unknown field "labelz"`,
		},
		"a misnamed auth field": {
			manifest: `apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata:
  name: pelwarden-tls
spec:
  secretTargetRefs:
    - parameter: caCert
      name: pelwarden-client-tls
      key: ca.crt
`,
			problem: ".spec.secretTargetRefs: unknown field",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := kedaDocs(tc.manifest)
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.problem)
		})
	}
}
