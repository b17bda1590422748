package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/pelwarden/pelwarden/internal/metadata"
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

func TestNotesPrintAScaledObjectPelwardenAccepts(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		files, sets []string
		params      []string // TriggerAuthentication parameters; nil: none
		reclaim     string   // the trigger's reclaim: only where triggers.reclaim allows it
	}{
		"default values": {},
		"TLS without client certificates": {
			sets:   []string{"grpc.tls.enabled=true", "grpc.tls.secretName=pelwarden-tls", "service.grpcPort=19090"},
			params: []string{"caCert"},
		},
		"every option on": {files: []string{allOnValues()}, params: kedaTLSParams, reclaim: "requeue"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			notes, err := renderNotes(t, tc.files, tc.sets)
			require.NoError(t, err)
			start := strings.Index(notes, "apiVersion: keda.sh/v1alpha1")
			require.GreaterOrEqual(t, start, 0, "NOTES should print a KEDA object:\n%s", notes)
			objs, err := kedaDocs(notes[start:])
			require.NoError(t, err, "the objects NOTES prints should match KEDA's CRDs:\n%s", notes[start:])

			stream, err := renderChart(t, chartDir, tc.files, tc.sets)
			require.NoError(t, err)
			manifests, err := decodeManifests(stream)
			require.NoError(t, err)
			cfg, err := loadRendered(t, manifests)
			require.NoError(t, err)
			var conns []string
			for _, r := range cfg.Redis {
				conns = append(conns, r.Name)
			}
			var grpcAddr string
			for _, svc := range all[*corev1.Service](manifests) {
				if svc.Spec.Ports[0].Name == "grpc" {
					grpcAddr = fmt.Sprintf("%s.%s.svc.cluster.local:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
				}
			}

			scaled := byKind(objs, "ScaledObject")
			require.Len(t, scaled, 1)
			trs := triggers(scaled[0])
			require.Len(t, trs, 1)
			require.Equal(t, "external", trs[0].typ)
			require.Equal(t, grpcAddr, trs[0].metadata["scalerAddress"], "scalerAddress should be the rendered gRPC Service")
			r, err := metadata.ParseTrigger(trs[0].metadata, metadata.Env{Conns: conns, Namespace: "workers", Kubernetes: true})
			require.NoError(t, err, "pelwarden should accept the trigger metadata NOTES prints")
			require.Nil(t, r.HygieneErr, "NOTES prints no hygiene key a trigger may not set")
			require.Equal(t, tc.reclaim, trs[0].metadata["reclaim"], "NOTES asks for reclaim only where triggers.reclaim allows it")

			auths := byKind(objs, "TriggerAuthentication")
			if tc.params == nil {
				require.Empty(t, auths)
				require.Empty(t, trs[0].authRef)
				return
			}
			require.Len(t, auths, 1)
			require.Equal(t, auths[0].meta.Name, trs[0].authRef, "the trigger should use the printed TriggerAuthentication")
			require.Equal(t, tc.params, authParams(auths[0]))
		})
	}
}

func TestExamplesAreKEDAObjectsPelwardenAccepts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var objs []kedaObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		docs, err := kedaDocs(string(data))
		require.NoError(t, err, "%s should match KEDA's CRDs", filepath.Base(f))
		objs = append(objs, docs...)
	}

	// The examples name the liveness profiles of the chart's all-on values.
	stream, err := renderChart(t, chartDir, []string{allOnValues()}, nil)
	require.NoError(t, err)
	rendered, err := decodeManifests(stream)
	require.NoError(t, err)
	cfg, err := loadRendered(t, rendered)
	require.NoError(t, err)
	env := cfg.Env()
	auths := map[string][]string{}
	for _, ta := range byKind(objs, "TriggerAuthentication") {
		auths[ta.meta.Name] = authParams(ta)
	}
	types := map[string]bool{}
	usedAuth := false
	for _, so := range byKind(objs, "ScaledObject") {
		for _, tr := range triggers(so) {
			types[tr.typ] = true
			require.Contains(t, []string{"external", "external-push"}, tr.typ)
			require.True(t, strings.HasSuffix(tr.metadata["scalerAddress"], ".svc.cluster.local:9090"),
				"%s: scalerAddress should be a Service address on port 9090", so.meta.Name)
			env.Namespace = so.meta.Namespace
			r, err := metadata.ParseTrigger(tr.metadata, env)
			require.NoError(t, err, "%s: pelwarden should accept the trigger metadata", so.meta.Name)
			require.Nil(t, r.HygieneErr, "%s: no hygiene key a trigger may not set", so.meta.Name)
			if tr.authRef != "" {
				params, ok := auths[tr.authRef]
				require.True(t, ok, "%s: authenticationRef %s should name an example TriggerAuthentication", so.meta.Name, tr.authRef)
				require.Equal(t, kedaTLSParams, params, "the TLS example should hand KEDA a CA, a client certificate and its key")
				usedAuth = true
			}
		}
	}
	require.Equal(t, map[string]bool{"external": true, "external-push": true}, types, "examples should show both trigger types")
	require.True(t, usedAuth, "an example ScaledObject should use the TLS TriggerAuthentication")
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
