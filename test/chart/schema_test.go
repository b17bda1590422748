package chart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// values.schema.json must stop a bad value before anything is rendered,
// with an error that names it, in both lint and template.
func TestSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		values  string
		problem string
	}{
		"a negative replica count": {values: "replicaCount: -1", problem: "/replicaCount"},
		"an unknown log level":     {values: "log: {level: loud}", problem: "/log/level"},
		"an unknown log format":    {values: "log: {format: xml}", problem: "/log/format"},
		"an unknown top-level key": {values: "replicas: 2", problem: "'replicas' not allowed"},
		"a misspelled nested key":  {values: "scaler: {freshnes: 1s}", problem: "'freshnes' not allowed"},
		"TLS without a Secret":     {values: "grpc: {tls: {enabled: true}}", problem: "/grpc/tls"},
		"no Redis connection":      {values: "redis: []", problem: "/redis"},
		"a Redis name pelwarden refuses": {
			values: "redis: [{name: Primary, addr: 'redis:6379'}]", problem: "/redis/0/name",
		},
		"a Redis address without a port": {
			values: "redis: [{name: default, addr: redis}]", problem: "/redis/0/addr",
		},
		"an unknown Redis mode": {
			values: "redis: [{name: default, mode: replicated}]", problem: "/redis/0/mode",
		},
		"sentinel without a master name": {
			values: "redis: [{name: default, mode: sentinel, sentinel: {addrs: ['s:26379']}}]", problem: "/redis/0/sentinel",
		},
		"a cluster seed without a port": {
			values: "redis: [{name: default, mode: cluster, cluster: {addrs: [node-0]}}]", problem: "/redis/0/cluster/addrs/0",
		},
		"a password written into values": {
			values: "redis: [{name: default, addr: 'redis:6379', password: hunter2}]", problem: "'password' not allowed",
		},
		"a duration Go cannot parse":  {values: "hygiene: {scanInterval: 10 seconds}", problem: "/hygiene/scanInterval"},
		"a batch size over the limit": {values: "hygiene: {batchSize: 20000}", problem: "/hygiene/batchSize"},
		"a hygiene target that never reclaims": {
			values:  "hygiene: {targets: [{stream: jobs, consumerGroup: workers, reclaim: 'off'}]}",
			problem: "/hygiene/targets/0",
		},
		"a hygiene value that is not a string": {
			values:  "hygiene: {targets: [{stream: jobs, consumerGroup: workers, reclaim: requeue, maxDeliveries: 5}]}",
			problem: "/hygiene/targets/0",
		},
		"a port out of range": {values: "service: {grpcPort: 70000}", problem: "/service/grpcPort"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "values.yaml")
			require.NoError(t, os.WriteFile(file, []byte(tc.values+"\n"), 0o600))

			lintOut, lintErr, err := helmRun(t, "lint", chartDir, "--namespace", namespace, "--values", file)
			require.Error(t, err, "helm lint should reject %q", tc.values)
			require.Contains(t, lintOut+lintErr, tc.problem)

			_, err = renderChart(t, chartDir, []string{file}, nil)
			require.Error(t, err, "helm template should reject %q", tc.values)
			require.ErrorContains(t, err, tc.problem)
		})
	}
}
