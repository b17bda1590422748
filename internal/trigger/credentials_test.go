package trigger

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestATriggerCarryingCredentialsIsWarnedAboutOnceByKeyNames: a trigger
// moved from KEDA's scaler with its password keys is served, and the log
// says once which keys to remove, never their values.
func TestATriggerCarryingCredentialsIsWarnedAboutOnceByKeyNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var logs bytes.Buffer
	f.reg.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	const password = "hunter2-resolved"
	m := md("reclaim", "", "livenessProfile", "", "passwordFromEnv", password, "username", "keda")
	for range 3 {
		require.NoError(t, f.admit(t, "apps", "worker", m))
	}
	require.Equal(t, 1, strings.Count(logs.String(), "carries Redis credentials"), logs.String())
	require.Contains(t, logs.String(), "remove username, passwordFromEnv from the trigger")
	require.Contains(t, logs.String(), "scaledObject=worker")
	require.NotContains(t, logs.String(), password)
	require.NotContains(t, logs.String(), "keda ", "not the username either")
}
