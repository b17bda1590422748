package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/lograte"
)

func TestLogUnaryLogsFailuresAndLeavesSteadyPollsAtDebug(t *testing.T) {
	t.Parallel()
	info := &grpc.UnaryServerInfo{FullMethod: "/externalscaler.ExternalScaler/GetMetrics"}
	cases := map[string]struct {
		err  error
		want []string // substrings of the log line; nil: nothing logged
	}{
		"ok":          {err: nil},
		"canceled":    {err: status.Error(codes.Canceled, "gone")},
		"unavailable": {err: status.Error(codes.Unavailable, "redis down"), want: []string{"level=WARN", `msg="finished call"`, "grpc.service=externalscaler.ExternalScaler", "grpc.method=GetMetrics", "grpc.code=Unavailable", `grpc.error="redis down"`}},
		"internal":    {err: status.Error(codes.Internal, "internal error"), want: []string{"level=ERROR", "grpc.code=Internal"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			_, err := logUnary(log, failedCalls{})(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, tc.err })
			require.Equal(t, tc.err, err, "the handler's error passes through")
			if tc.want == nil {
				require.Empty(t, buf.String())
				return
			}
			for _, w := range tc.want {
				require.Contains(t, buf.String(), w)
			}
		})
	}
}

func TestLogUnaryLogsSteadyPollsWhenDebugIsOn(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	info := &grpc.UnaryServerInfo{FullMethod: "/externalscaler.ExternalScaler/IsActive"}
	_, err := logUnary(log, failedCalls{})(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	require.NoError(t, err)
	require.Contains(t, buf.String(), "level=DEBUG")
	require.Contains(t, buf.String(), "grpc.code=OK")
	require.Contains(t, buf.String(), "grpc.method=IsActive")
}

// TestFailedCallsAreLoggedOncePerIntervalPerMethodAndCode: a caller that
// makes a thousand calls fail gets one line, with the count left out on
// the next; another code or method is news of its own.
func TestFailedCallsAreLoggedOncePerIntervalPerMethodAndCode(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	now := time.Unix(0, 0)
	failed := failedCalls{lim: lograte.New(callLogEvery, func() time.Time { return now })}
	call := func(method string, code codes.Code) {
		info := &grpc.UnaryServerInfo{FullMethod: method}
		_, _ = logUnary(log, failed)(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, status.Error(code, "bad") })
	}
	for range 1000 {
		call("/externalscaler.ExternalScaler/GetMetrics", codes.InvalidArgument)
	}
	require.Equal(t, 1, strings.Count(buf.String(), "finished call"), "a thousand failures, one line")
	call("/externalscaler.ExternalScaler/GetMetrics", codes.PermissionDenied)
	call("/externalscaler.ExternalScaler/IsActive", codes.InvalidArgument)
	require.Equal(t, 3, strings.Count(buf.String(), "finished call"), "another code, another method: news")
	now = now.Add(callLogEvery)
	call("/externalscaler.ExternalScaler/GetMetrics", codes.InvalidArgument)
	require.Equal(t, 4, strings.Count(buf.String(), "finished call"))
	require.Contains(t, buf.String(), "suppressed=999")
}

func TestStreamCallReadsTheMethodAndCodeOfTheLoggingFields(t *testing.T) {
	t.Parallel()
	method, code := streamCall([]any{"protocol", "grpc", "grpc.service", "externalscaler.ExternalScaler", "grpc.method", "StreamIsActive", "grpc.code", "InvalidArgument"})
	require.Equal(t, "/externalscaler.ExternalScaler/StreamIsActive", method)
	require.Equal(t, codes.InvalidArgument.String(), code)
}

func TestTheUnaryChainCountsAndLogsARefusedCallAndAPanic(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		method  string
		handler grpc.UnaryHandler
		code    codes.Code
		log     []string
	}{
		"a panic is Internal, with no stack to the client": {
			method:  "/externalscaler.ExternalScaler/GetMetrics",
			handler: func(context.Context, any) (any, error) { panic("boom") },
			code:    codes.Internal,
			log:     []string{`msg="panic in gRPC handler"`, "panic=boom", `msg="finished call"`, "grpc.code=Internal", `grpc.error="internal error"`},
		},
		"a guarded call without a credential is refused before its handler": {
			method:  "/pelwarden.v1.Admin/Reclaim",
			handler: func(context.Context, any) (any, error) { panic("the handler ran") },
			code:    codes.PermissionDenied,
			log:     []string{`msg="finished call"`, "grpc.method=Reclaim", "grpc.code=PermissionDenied"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			reg := prometheus.NewRegistry()
			ch := newChain(log, reg, newAdminAuth(config.Admin{}, log), nil)
			_, err := ch.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, tc.handler)
			require.Equal(t, tc.code, status.Code(err))
			require.NotContains(t, status.Convert(err).Message(), "goroutine", "no stack trace to the client")
			for _, want := range tc.log {
				require.Contains(t, buf.String(), want)
			}
			service, method := splitMethod(tc.method)
			handled := testutil.ToFloat64(ch.metrics.handled.WithLabelValues(rpcUnary, service, method, tc.code.String()))
			require.InDelta(t, 1, handled, 0, "counted under its code")
			require.InDelta(t, 1, testutil.ToFloat64(ch.metrics.started.WithLabelValues(rpcUnary, service, method)), 0)
		})
	}
}
