package scaler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// refusingServer parses against one connection, "default", and admits
// every namespace but intruder (no rule reaches it) and full (its quota
// is taken). It records what it admitted and what it was told was
// answered with the placeholder.
func refusingServer(admitted *[]string, refused *[]error) *Server {
	return New(nil, Options{
		Env:            metadata.Env{Conns: []string{"default"}},
		ParseCacheSize: 8,
		Admit: func(id trigger.ID, _ *metadata.Request) error {
			switch id.Namespace {
			case "intruder":
				return &trigger.Refusal{Code: codes.PermissionDenied, Key: "redis", Rule: "no triggers.rules entry names both"}
			case "full":
				return &trigger.Refusal{Code: codes.ResourceExhausted, Rule: "triggers.quotas.scalerTargets"}
			}
			*admitted = append(*admitted, id.Namespace)
			return nil
		},
		Refused: func(_ context.Context, err error) { *refused = append(*refused, err) },
	})
}

// conflicting is KEDA's documented mistake: two metric keys at once.
func conflicting() map[string]string {
	return map[string]string{"stream": "jobs", "consumerGroup": "workers", "backlogCount": "5", "lagCount": "5"}
}

// TestGetMetricSpecAnswersARefusedTriggerWithASpec: KEDA drops a
// GetMetricSpec error, so a trigger refused for what it says gets a spec,
// admitted nowhere, and the refusal is reported: the placeholder where its
// metadata does not parse, its own spec where only the trigger policy
// refuses it (a new policy then serves the metric the HPA asks for). Every
// other RPC keeps answering the refusal itself, naming the key.
func TestGetMetricSpecAnswersARefusedTriggerWithASpec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := map[string]struct {
		ref    *externalscaler.ScaledObjectRef
		code   codes.Code
		key    string
		metric string
		target int64
	}{
		"bad metadata":          {ref("apps", conflicting()), codes.InvalidArgument, `"backlogCount"`, RefusedMetricName, 1},
		"a connection not ours": {ref("intruder", map[string]string{"stream": "jobs", "consumerGroup": "workers"}), codes.PermissionDenied, `"redis"`, "pelwarden-default-jobs-workers", 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var admitted []string
			var refused []error
			s := refusingServer(&admitted, &refused)
			spec, err := s.GetMetricSpec(ctx, tc.ref)
			require.NoError(t, err)
			require.Equal(t, tc.metric, spec.GetMetricSpecs()[0].GetMetricName())
			require.Equal(t, tc.target, spec.GetMetricSpecs()[0].GetTargetSize())
			require.Len(t, refused, 1, "the spec is reported as a refusal")
			require.Equal(t, tc.code, status.Code(refused[0]))
			require.Contains(t, status.Convert(refused[0]).Message(), tc.key)
			require.Empty(t, admitted, "nothing admitted")

			for _, metric := range []string{"", "pelwarden-default-jobs-workers", RefusedMetricName} {
				_, err = s.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: tc.ref, MetricName: metric})
				require.Equal(t, tc.code, status.Code(err), "GetMetrics %q: %v", metric, err)
				require.Contains(t, status.Convert(err).Message(), tc.key)
			}
			_, err = s.IsActive(ctx, tc.ref)
			require.Equal(t, tc.code, status.Code(err), "IsActive: %v", err)
			require.Contains(t, status.Convert(err).Message(), tc.key)
			specs := newSpecStream()
			specs.sent = func(*externalscaler.GetMetricSpecResponse) { specs.cancel() }
			require.NoError(t, s.StreamMetricSpec(tc.ref, specs)) //nolint:contextcheck // a stream carries its own context
			require.Len(t, specs.specs, 1)
			require.Equal(t, tc.metric, specs.specs[0].GetMetricSpecs()[0].GetMetricName(), "StreamMetricSpec sends the same spec")
			err = s.StreamIsActive(tc.ref, noStream[externalscaler.IsActiveResponse]{}) //nolint:contextcheck // a stream carries its own context
			require.Equal(t, tc.code, status.Code(err), "StreamIsActive: %v", err)
			require.Empty(t, admitted, "nothing admitted")
			require.Len(t, refused, 2, "GetMetricSpec and StreamMetricSpec answered the refused trigger")
		})
	}
}

// TestGetMetricSpecKeepsTransientAndBoundErrors: a full quota, a missing
// ref and a field past its bound stay errors, with no placeholder: KEDA
// retries GetMetricSpec, and must then get the real spec.
func TestGetMetricSpecKeepsTransientAndBoundErrors(t *testing.T) {
	t.Parallel()
	var admitted []string
	var refused []error
	s := refusingServer(&admitted, &refused)
	ctx := context.Background()
	_, err := s.GetMetricSpec(ctx, ref("full", map[string]string{"stream": "jobs", "consumerGroup": "workers"}))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	_, err = s.GetMetricSpec(ctx, nil)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	_, err = s.GetMetricSpec(ctx, &externalscaler.ScaledObjectRef{Namespace: string(make([]byte, 64)), Name: "so", ScalerMetadata: conflicting()})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "namespace: must be at most")
	require.Empty(t, refused)

	other := New(nil, Options{ParseCacheSize: 8, Refused: func(_ context.Context, e error) { refused = append(refused, e) },
		Parse: func(*externalscaler.ScaledObjectRef) (metadata.Request, error) {
			return metadata.Request{}, errors.New("no status")
		}})
	_, err = other.GetMetricSpec(ctx, ref("apps", conflicting()))
	require.Error(t, err, "an error without a refusal's code stays an error")
	require.Empty(t, refused)
}

// TestThePlaceholderMetricIsNeverServed: an HPA KEDA made from the
// placeholder asks for its metric; once the trigger parses, the answer is
// FailedPrecondition saying how to get the real spec, never a value that
// the placeholder's target of 1 would scale on. The trigger's own metric
// is unaffected.
func TestThePlaceholderMetricIsNeverServed(t *testing.T) {
	t.Parallel()
	var admitted []string
	var refused []error
	s := refusingServer(&admitted, &refused)
	good := ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "workers"})
	spec, err := s.GetMetricSpec(context.Background(), good)
	require.NoError(t, err)
	require.False(t, IsRefusedSpec(spec))
	for _, name := range []string{RefusedMetricName, "s0-" + RefusedMetricName, "s12-" + RefusedMetricName} {
		_, err := s.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: good, MetricName: name})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", name, err)
		require.Contains(t, err.Error(), "re-apply or touch the ScaledObject")
	}
	require.Empty(t, refused)
}

func TestIsRefusedMetricTakesKEDAsPrefixOnly(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		RefusedMetricName:                   true,
		"s0-" + RefusedMetricName:           true,
		"s105-" + RefusedMetricName:         true,
		"s-" + RefusedMetricName:            false,
		"sx0-" + RefusedMetricName:          false,
		"s0" + RefusedMetricName:            false,
		"pelwarden-c-pelwarden-refused":     false, // connection c, stream pelwarden, group refused
		"pelwarden-refused-jobs-workers":    false, // connection refused
		"s0-pelwarden-refused-jobs-workers": false,
		"pelwarden-default-jobs-workers":    false,
		RefusedMetricName + "-":             false,
		"":                                  false,
	} {
		require.Equal(t, want, IsRefusedMetric(name), "%q", name)
	}
}

// specStream is a StreamMetricSpec stream that keeps what it is sent and
// ends when told.
type specStream struct {
	noStream[externalscaler.GetMetricSpecResponse]
	ctx    context.Context
	cancel context.CancelFunc
	specs  []*externalscaler.GetMetricSpecResponse
	sent   func(*externalscaler.GetMetricSpecResponse)
}

func newSpecStream() *specStream {
	ctx, cancel := context.WithCancel(context.Background())
	return &specStream{ctx: ctx, cancel: cancel}
}

func (s *specStream) Context() context.Context { return s.ctx }

func (s *specStream) Send(m *externalscaler.GetMetricSpecResponse) error {
	s.specs = append(s.specs, m)
	s.sent(m)
	return nil
}

// TestStreamMetricSpecSendsTheSpecOnceACapLetsTheTriggerIn: a push
// trigger refused for a cap is sent nothing while the cap holds, and its
// spec as soon as it is admitted, on the same stream: KEDA's HPA gets it
// with nobody touching the ScaledObject.
func TestStreamMetricSpecSendsTheSpecOnceACapLetsTheTriggerIn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	capped := true
	s := New(nil, Options{
		Env: metadata.Env{Conns: []string{"default"}}, ParseCacheSize: 8, ResendInterval: 5 * time.Millisecond,
		Admit: func(trigger.ID, *metadata.Request) error {
			mu.Lock()
			defer mu.Unlock()
			if capped {
				return &trigger.Refusal{Code: codes.ResourceExhausted, Rule: "triggers.quotas.scalerTargets"}
			}
			return nil
		},
	})
	time.AfterFunc(50*time.Millisecond, func() {
		mu.Lock()
		capped = false
		mu.Unlock()
	})
	specs := newSpecStream()
	var sentAt time.Time
	start := time.Now()
	specs.sent = func(*externalscaler.GetMetricSpecResponse) { sentAt = time.Now(); specs.cancel() }
	require.NoError(t, s.StreamMetricSpec(ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "workers"}), specs))
	require.Len(t, specs.specs, 1, "one spec, once admitted")
	require.Equal(t, "pelwarden-default-jobs-workers", specs.specs[0].GetMetricSpecs()[0].GetMetricName())
	require.GreaterOrEqual(t, sentAt.Sub(start), 50*time.Millisecond, "nothing was sent while the cap held")
}
