package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAPlaceholderIsLoggedAndCountedAsARefusal: the call succeeded, so
// only refusedSpecs says a trigger was refused: counted by the refusal's
// code, logged with its text, and the log bounded per code however many
// callers send refused triggers.
func TestAPlaceholderIsLoggedAndCountedAsARefusal(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	r := newRefusedSpecs(slog.New(slog.NewTextHandler(&out, nil)), reg)
	ctx := context.Background()
	for range 100 {
		r.note(ctx, status.Error(codes.InvalidArgument, `metadata "backlogCount": set only one of backlogCount and lagCount`))
	}
	r.note(ctx, status.Error(codes.PermissionDenied, `metadata "redis": no triggers.rules entry names both`))
	require.InDelta(t, 100, testutil.ToFloat64(r.count[codes.InvalidArgument]), 0)
	require.InDelta(t, 1, testutil.ToFloat64(r.count[codes.PermissionDenied]), 0)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "one line per code within callLogEvery:\n%s", out.String())
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "refusal.code=InvalidArgument")
	require.Contains(t, lines[0], `set only one of backlogCount and lagCount`)
	require.Contains(t, lines[1], "refusal.code=PermissionDenied")
	n, err := testutil.GatherAndCount(reg, "pelwarden_scaler_refused_metric_specs_total")
	require.NoError(t, err)
	require.Equal(t, 2, n, "a series per code the placeholder stands for")
}
