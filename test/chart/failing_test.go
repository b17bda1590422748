package chart

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each manifest carries one mistake that a lenient decoder would drop in
// silence; the strict decoder must name it.
func TestStrictDecodingRejectsWhatTheAPIServerWouldNot(t *testing.T) {
	t.Parallel()
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: pelwarden
spec:
  replicas: 1
  selector:
    matchLabels: {app: pelwarden}
  template:
    metadata:
      labels: {app: pelwarden}
    spec:
      securityContext:
        runAsNonRoot: true
      containers:
        - name: pelwarden
          image: pelwarden:dev
`
	for name, tc := range map[string]struct {
		manifest string
		problem  string // empty: must decode
	}{
		"a valid Deployment decodes": {manifest: deployment},
		"an unknown field": {
			manifest: strings.Replace(deployment, "image: pelwarden:dev", "image: pelwarden:dev\n          readinessProbes: {}", 1),
			problem:  `unknown field "spec.template.spec.containers[0].readinessProbes"`,
		},
		"a field in the wrong case": {
			manifest: strings.Replace(deployment, "runAsNonRoot", "runAsNonroot", 1),
			problem:  `unknown field "spec.template.spec.securityContext.runAsNonroot"`,
		},
		"a field given twice": {
			manifest: strings.Replace(deployment, "replicas: 1", "replicas: 1\n  replicas: 2", 1),
			problem:  `key "replicas" already set`,
		},
		"a value of the wrong type": {
			manifest: strings.Replace(deployment, "replicas: 1", "replicas: three", 1),
			problem:  "cannot unmarshal string",
		},
		"a field misplaced in a ServiceMonitor": {
			manifest: `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: pelwarden
spec:
  selector: {}
  interval: 30s
  endpoints:
    - port: http-metrics
`,
			problem: `unknown field "spec.interval"`,
		},
		"a name Kubernetes refuses": {
			manifest: strings.Replace(deployment, "name: pelwarden\nspec", "name: Pelwarden_1\nspec", 1),
			problem:  "Deployment name",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeManifests(tc.manifest)
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.problem)
		})
	}
}

// A chart with one thing wrong must turn the checks red: each mutation
// breaks a copy of the chart the way a careless edit would.
func TestChecksFailOnABrokenChart(t *testing.T) {
	t.Parallel()
	const allOn = "every option on"
	for name, tc := range map[string]struct {
		file, old, new string
		// base names the render case whose values and expectations apply;
		// empty means default values.
		base    string
		problem string
	}{
		"a writable root filesystem": {
			file: "values.yaml", old: "readOnlyRootFilesystem: true", new: "readOnlyRootFilesystem: false",
			problem: "readOnlyRootFilesystem must be true",
		},
		"running as root": {
			file: "values.yaml", old: "runAsUser: 65532", new: "runAsUser: 0",
			problem: "runAsUser must be 65532",
		},
		"liveness that follows Redis": {
			file: "templates/deployment.yaml", old: `service: ""`, new: "service: externalscaler.ExternalScaler",
			problem: "liveness probe must check service",
		},
		"gRPC probes kept under TLS": {
			file: "templates/deployment.yaml", old: `if include "pelwarden.grpcTLSEnabled" .`, new: "if false",
			base: allOn, problem: "must be httpGet while gRPC speaks TLS",
		},
		"a verb too many": {
			file: "templates/rbac.yaml", old: `(list "get" "list" "watch")`, new: `(list "get" "list" "watch" "delete")`,
			problem: "exactly get, list, watch on pods",
		},
		"a Role where a ClusterRole was asked for": {
			file: "templates/rbac.yaml", old: "if .Values.rbac.clusterWide", new: "if false",
			base: allOn, problem: "clusterWide",
		},
		"no spread over nodes": {
			file: "templates/deployment.yaml", old: "gt (int .Values.replicaCount) 1", new: "gt (int .Values.replicaCount) 5",
			base: allOn, problem: "anti-affinity",
		},
		"no config checksum": {
			file: "templates/deployment.yaml", old: "checksum/config:", new: "checksum/other:",
			problem: "checksum/config",
		},
		"a misspelled pod field": {
			file: "templates/deployment.yaml", old: "terminationGracePeriodSeconds:", new: "terminationGracePeriod:",
			problem: "unknown field",
		},
		"a misspelled ServiceMonitor field": {
			file: "templates/servicemonitor.yaml", old: "metricRelabelings:", new: "metricRelabellings:",
			base: allOn, problem: "unknown field",
		},
		"a misspelled PrometheusRule field": {
			file: "templates/prometheusrule.yaml", old: "for: {{ $a.ghostEntriesHeld.for }}", new: "fore: {{ $a.ghostEntriesHeld.for }}",
			base: allOn, problem: "unknown field",
		},
		"an alert without its runbook": {
			file: "templates/prometheusrule.yaml", old: `{{- include "pelwarden.runbook" (list . "PelwardenHygieneErrors") }}`, new: "",
			base: allOn, problem: "alert PelwardenHygieneErrors: annotation runbook_url is missing",
		},
		"a dashboard the Grafana sidecar does not pick up": {
			file: "templates/dashboard-configmap.yaml", old: "{{ .Values.grafanaDashboard.label }}:", new: "dashboard:",
			base: allOn, problem: "grafana_dashboard=1",
		},
		"a config key pelwarden does not know": {
			file: "templates/_config.tpl", old: `"log" .Values.log`, new: `"logging" .Values.log`,
			problem: "logging",
		},
		"a password file the pod does not mount": {
			file: "templates/_config.tpl", old: `"%s/redis/%s/password"`, new: `"%s/redis/%s/pass"`,
			base: allOn, problem: "does not provide",
		},
		"an API token the pod does not need": {
			file: "templates/deployment.yaml", old: "automountServiceAccountToken: {{ .Values.kubernetes.enabled }}",
			new: "automountServiceAccountToken: true", base: "kubernetes source off", problem: "automountServiceAccountToken must be false",
		},
		"a secret mounted with subPath": {
			file: "templates/deployment.yaml", old: "readOnly: true\n", new: "readOnly: true\n              subPath: config.yaml\n",
			problem: "subPath",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := copyChart(t)
			p := filepath.Join(dir, filepath.FromSlash(tc.file))
			text, err := os.ReadFile(p)
			require.NoError(t, err)
			require.Contains(t, string(text), tc.old, "the mutation must apply to the chart as it is")
			require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(text), tc.old, tc.new, 1)), 0o600))

			base := tc.base
			if base == "" {
				base = "default values"
			}
			rc, ok := renderCases()[base]
			require.True(t, ok, "no render case %q", base)
			stream, err := renderChart(t, dir, rc.files, rc.sets)
			require.NoError(t, err, "the broken chart still renders; the checks must catch it")
			objs, err := decodeManifests(stream)
			if err == nil {
				err = checkRender(objs, rc.want)
			}
			if err == nil {
				_, err = loadRendered(t, objs)
			}
			require.ErrorContains(t, err, tc.problem)
		})
	}
}

// copyChart copies charts/pelwarden into a temporary directory.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "pelwarden")
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	require.NoError(t, err)
	return dst
}
