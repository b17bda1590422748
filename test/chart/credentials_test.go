package chart

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTheWorkersCredentialReachesPelwardensConfig(t *testing.T) {
	t.Parallel()
	stream, err := renderChart(t, chartDir, nil, []string{"admin.token.existingSecret=ops", "admin.workerToken.existingSecret=workers",
		"admin.workerToken.key=wt", "admin.workerIdentityPrefix=spiffe://cluster.local/pelwarden/worker/"})
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err)
	cfg, err := loadRendered(t, objs)
	require.NoError(t, err)
	worker, err := os.ReadFile(cfg.Admin.WorkerTokenFile)
	require.NoError(t, err)
	require.Equal(t, "password-from-workers/wt", string(worker), "the worker token file is the workers' Secret, mounted")
	require.NotEqual(t, cfg.Admin.TokenFile, cfg.Admin.WorkerTokenFile)
	require.Equal(t, "spiffe://cluster.local/pelwarden/worker/", cfg.Admin.WorkerIdentityPrefix)

	_, err = renderChart(t, chartDir, nil, []string{"admin.workerIdentityPrefix=worker-"})
	require.Error(t, err, "the schema refuses a prefix that is no URI")
}
