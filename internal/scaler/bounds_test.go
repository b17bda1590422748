package scaler

import (
	"context"
	"strings"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// noStream is a server stream that a handler refusing its request never
// touches.
type noStream[T any] struct{ grpc.ServerStream }

func (noStream[T]) Send(*T) error            { panic("a refused request sent an answer") }
func (noStream[T]) Context() context.Context { return context.Background() }

// TestEveryHandlerRefusesAFieldPastItsBoundBeforeParsingIt: a namespace,
// name, metadata value, key count or metric name past its bound is
// InvalidArgument naming the field and the limit, from every
// ExternalScaler RPC, and nothing is parsed, cached or admitted.
func TestEveryHandlerRefusesAFieldPastItsBoundBeforeParsingIt(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	many := map[string]string{}
	for i := range metadata.MaxKeys + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	md := map[string]string{"stream": "jobs", "consumerGroup": "w"}
	cases := map[string]struct {
		ref  *externalscaler.ScaledObjectRef
		want string
	}{
		"namespace": {&externalscaler.ScaledObjectRef{Namespace: huge, Name: "so", ScalerMetadata: md}, "namespace: must be at most 63 bytes"},
		"name":      {&externalscaler.ScaledObjectRef{Namespace: "apps", Name: huge, ScalerMetadata: md}, "name: must be at most 253 bytes"},
		"a value": {
			&externalscaler.ScaledObjectRef{Namespace: "apps", Name: "so", ScalerMetadata: map[string]string{"stream": huge, "consumerGroup": "w"}},
			`metadata["stream"]: must be at most 4096 bytes`,
		},
		"the keys": {&externalscaler.ScaledObjectRef{Namespace: "apps", Name: "so", ScalerMetadata: many}, "metadata: must be at most 64 keys"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			calls, admitted := 0, 0
			s := New(nil, Options{Parse: countingParse(&calls), ParseCacheSize: 8,
				Admit: func(trigger.ID, *metadata.Request) error { admitted++; return nil }})
			ctx := context.Background()
			_, err := s.GetMetricSpec(ctx, tc.ref)
			requireBound(t, err, tc.want, "GetMetricSpec")
			_, err = s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: tc.ref, MetricName: "s0-m"})
			requireBound(t, err, tc.want, "GetMetrics")
			_, err = s.IsActive(ctx, tc.ref)
			requireBound(t, err, tc.want, "IsActive")
			requireBound(t, s.StreamIsActive(tc.ref, noStream[externalscaler.IsActiveResponse]{}), tc.want, "StreamIsActive")
			requireBound(t, s.StreamMetricSpec(tc.ref, noStream[externalscaler.GetMetricSpecResponse]{}), tc.want, "StreamMetricSpec")
			require.Zero(t, calls, "nothing was parsed")
			require.Zero(t, admitted, "nothing was admitted")
			require.Zero(t, s.parsed.lru.Len(), "nothing was cached")
		})
	}
}

func TestGetMetricsRefusesALongMetricNameBeforeParsing(t *testing.T) {
	t.Parallel()
	calls := 0
	s := New(nil, Options{Parse: countingParse(&calls), ParseCacheSize: 8})
	_, err := s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{
		ScaledObjectRef: ref("apps", map[string]string{"stream": "jobs"}), MetricName: strings.Repeat("m", 1<<20),
	})
	requireBound(t, err, "metricName: must be at most 256 bytes", "GetMetrics")
	require.Zero(t, calls)
}

func requireBound(t *testing.T, err error, want, rpc string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", rpc, err)
	require.Contains(t, status.Convert(err).Message(), want, rpc)
	require.Less(t, len(status.Convert(err).Message()), 200, "%s: the value is not echoed", rpc)
}
