package scaler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// movedEnv has one standalone connection, default, at redis:6379.
var movedEnv = metadata.Env{Conns: []string{"default"},
	Connections: []metadata.Connection{{Name: "default", Addrs: []string{"redis:6379"}}}}

// movedTrigger is a trigger moved from KEDA's redis-streams scaler that
// kept its FromEnv keys: KEDA forwards the values it resolved.
func movedTrigger(password, address string) map[string]string {
	return map[string]string{"stream": "jobs", "consumerGroup": "workers", "scalerAddress": "pelwarden:9090",
		"passwordFromEnv": password, "password": password, "addressFromEnv": address}
}

// TestTheParseCacheKeepsNoValueKEDAResolvedNorACredential: the cache's
// copy of a moved trigger and its ID hold the secret keys by name only,
// so the same trigger with another password is the same entry.
func TestTheParseCacheKeepsNoValueKEDAResolvedNorACredential(t *testing.T) {
	t.Parallel()
	const password, address = "hunter2-resolved", "redis:6379"
	s := New(nil, Options{Env: movedEnv, ParseCacheSize: 8})
	r, id, err := s.parsed.get(ref("apps", movedTrigger(password, address)))
	require.NoError(t, err)
	require.Equal(t, []string{"password", "passwordFromEnv"}, r.Credentials)
	p, ok := s.parsed.lru.Get(id)
	require.True(t, ok)
	require.NotContains(t, p.metadata.text, password)
	require.NotContains(t, p.metadata.text, address, "a value KEDA resolved from the environment is a secret too")
	require.Contains(t, p.metadata.text, "passwordFromEnv", "kept by name")

	_, other, err := s.parsed.get(ref("apps", movedTrigger("another-password", address)))
	require.NoError(t, err)
	require.Equal(t, id, other, "secret values are not part of a trigger's ID")
	require.Equal(t, trigger.IDOf("apps", "so", movedTrigger("x", "y")), id)
}

// TestAConnectionKeyResolvedFromTheEnvironmentIsCheckedOnEveryCall: the
// cache keeps no resolved value, so a cached trigger whose addressFromEnv
// now names another server is refused on the call that sends it, naming
// the key and never the value, and served again once it agrees.
func TestAConnectionKeyResolvedFromTheEnvironmentIsCheckedOnEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var admitted int
	s := New(nil, Options{Env: movedEnv, ParseCacheSize: 8, Admit: func(trigger.ID, *metadata.Request) error { admitted++; return nil }})
	spec, err := s.GetMetricSpec(ctx, ref("apps", movedTrigger("pw", "redis:6379")))
	require.NoError(t, err)
	require.False(t, IsRefusedSpec(spec))

	moved := ref("apps", movedTrigger("pw", "10.1.2.3:6379"))
	spec, err = s.GetMetricSpec(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, "pelwarden-default-jobs-workers", spec.GetMetricSpecs()[0].GetMetricName(),
		"refused, and answered its own spec: a configuration that agrees with it would serve the same metric")
	_, err = s.IsActive(ctx, moved)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	msg := status.Convert(err).Message()
	require.Contains(t, msg, `"addressFromEnv"`)
	require.Contains(t, msg, "dials redis:6379")
	require.NotContains(t, msg, "10.1.2.3", "the resolved value is never quoted")
	require.Equal(t, 1, admitted, "a refused call admits nothing")

	spec, err = s.GetMetricSpec(ctx, ref("apps", movedTrigger("pw", "REDIS:6379")))
	require.NoError(t, err)
	require.False(t, IsRefusedSpec(spec))
}
