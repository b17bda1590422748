package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// offlineConfig is a configuration whose password file does not exist
// here: an offline check reads no password.
const offlineConfig = `
redis:
  - name: default
    addr: redis.jobs.svc:6379
    passwordFile: /run/secrets/not-here
`

const scaledObjects = `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: workers
  namespace: jobs
spec:
  scaleTargetRef: {name: workers}
  triggers:
    - type: cpu
      metadata: {value: "50"}
    - type: external
      metadata:
        scalerAddress: pelwarden.pelwarden:9090
        stream: jobs
        consumerGroup: workers
        pendingEntriesCount: 10
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: mailers
  namespace: mail
spec:
  triggers:
    - type: external-push
      name: greedy
      metadata:
        stream: mail
        consumerGroup: senders
        reclaim: requeue
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestCheckTriggerAnswersOfflineFromAConfigFileAndAScaledObjectFile(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "pelwarden.yaml", offlineConfig)
	so := writeFile(t, "so.yaml", scaledObjects)
	r := runAdmin(t, nil, "check-trigger", "--server", "127.0.0.1:1", "--config", cfg, "-f", so)
	require.Equal(t, exitFailure, r.code, "the second trigger's hygiene is refused: %s", r.stderr)
	require.Contains(t, r.stdout, "ScaledObject jobs/workers trigger 1 (external)\nmetric   served\nhygiene  not asked for\n\n"+
		"ScaledObject mail/mailers trigger greedy (external-push)\nmetric   served\n", "the cpu trigger and the ConfigMap are left out")
	require.Contains(t, r.stdout, "hygiene  refused PermissionDenied reclaim: ")
	require.Contains(t, r.stderr, "pelwarden: PermissionDenied: ScaledObject mail/mailers trigger greedy (external-push): hygiene refused, key reclaim: ")
}

func TestCheckTriggerReadsMetadataWithCommasOneKeyAFlagOrAsJSON(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "pelwarden.yaml", offlineConfig)
	cases := map[string]struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		"one key a flag": {
			args: []string{"--metadata", "stream=jobs", "--metadata", "consumerGroup=workers"}, code: exitOK, stdout: "metric   served\nhygiene  not asked for\n",
		},
		"a value with a comma reaches the parser whole": {
			args: []string{"--metadata", "stream=jobs", "--metadata", "consumerGroup=workers", "--metadata", "liveness=idle,heartbeat"},
			code: exitFailure, stdout: "metric   refused", stderr: "heartbeatKey",
		},
		"JSON": {
			args: []string{"--metadata-json", `{"stream":"jobs","consumerGroup":"workers"}`}, code: exitOK, stdout: "metric   served\n",
		},
		"the comma list of before is refused, not misread": {
			args: []string{"--metadata", "stream=jobs,consumerGroup=workers"}, code: exitUsage,
			stderr: `the value of stream holds "consumerGroup=": give each key its own --metadata`,
		},
		"a pair without =": {args: []string{"--metadata", "stream"}, code: exitUsage, stderr: `--metadata "stream": must be key=value`},
		"JSON not of strings": {
			args: []string{"--metadata-json", `{"lagCount":5}`}, code: exitUsage, stderr: "--metadata-json must be a JSON object of strings",
		},
		"no trigger named": {args: nil, code: exitUsage, stderr: "exactly one of -f FILE, --metadata"},
		"an unknown connection names the key": {
			args: []string{"--metadata", "redis=orders", "--metadata", "stream=jobs", "--metadata", "consumerGroup=workers"},
			code: exitFailure, stdout: "metric   refused InvalidArgument", stderr: `"redis"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"check-trigger", "--server", "127.0.0.1:1", "--config", cfg, "--namespace", "jobs"}, tc.args...)
			r := runAdmin(t, nil, args...)
			require.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stdout, tc.stdout)
			require.Contains(t, r.stderr, tc.stderr)
		})
	}
}

func TestCheckTriggerSaysWhatAFileLacks(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "pelwarden.yaml", offlineConfig)
	cases := map[string]struct{ content, stderr string }{
		"no namespace":        {"kind: ScaledObject\nmetadata: {name: w}\nspec: {triggers: [{type: external, metadata: {stream: s}}]}\n", "ScaledObject w has no metadata.namespace; pass --namespace"},
		"no external trigger": {"kind: ScaledObject\nmetadata: {name: w, namespace: n}\nspec: {triggers: [{type: redis-streams}]}\n", "no ScaledObject or ScaledJob trigger of type external or external-push"},
		"not YAML":            {"kind: [", "document 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runAdmin(t, nil, "check-trigger", "--config", cfg, "-f", writeFile(t, "so.yaml", tc.content))
			require.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stderr, tc.stderr)
		})
	}
}
