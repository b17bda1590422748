package app

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
			_, err := logUnary(log)(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, tc.err })
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
	_, err := logUnary(log)(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil })
	require.NoError(t, err)
	require.Contains(t, buf.String(), "level=DEBUG")
	require.Contains(t, buf.String(), "grpc.code=OK")
	require.Contains(t, buf.String(), "grpc.method=IsActive")
}
