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

func TestScopedWorkerTokensReachPelwardensConfig(t *testing.T) {
	t.Parallel()
	stream, err := renderChart(t, chartDir, nil, []string{
		"admin.workerTokens[0].existingSecret=jobs-workers", "admin.workerTokens[0].streams={jobs,jobs:*}",
		"admin.workerTokens[1].existingSecret=mail-workers", "admin.workerTokens[1].key=t", "admin.workerTokens[1].streams={mail*}"})
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err)
	cfg, err := loadRendered(t, objs)
	require.NoError(t, err)
	require.Len(t, cfg.Admin.WorkerTokens, 2)
	require.Equal(t, []string{"jobs", "jobs:*"}, cfg.Admin.WorkerTokens[0].Streams)
	require.Equal(t, []string{"mail*"}, cfg.Admin.WorkerTokens[1].Streams)
	for i, want := range []string{"password-from-jobs-workers/token", "password-from-mail-workers/t"} {
		token, err := os.ReadFile(cfg.Admin.WorkerTokens[i].TokenFile)
		require.NoError(t, err)
		require.Equal(t, want, string(token), "worker token %d is its Secret, mounted", i)
	}

	_, err = renderChart(t, chartDir, nil, []string{"admin.workerTokens[0].existingSecret=jobs-workers"})
	require.Error(t, err, "the schema refuses a scoped token without streams")
}
