package clip_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// logged is what one call of log writes through a JSON handler behind
// clip's, decoded.
func logged(t *testing.T, log func(*slog.Logger)) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log(slog.New(clip.NewHandler(slog.NewJSONHandler(&buf, nil))))
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), "%s", buf.String())
	return line
}

func TestHandlerCutsEveryLongStringOfALine(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("n", 1<<20)
	line := logged(t, func(l *slog.Logger) {
		l.With("namespace", huge).WithGroup("call").Warn(huge,
			"stream", huge,
			"err", errors.New(huge),
			"names", []string{huge},
			slog.Group("target", "group", huge),
			"count", 3,
			"short", "jobs")
	})
	require.Len(t, line["msg"], clip.MaxLogValue)
	require.Len(t, line["namespace"], clip.MaxLogValue, "an attribute added with With")
	call := line["call"].(map[string]any)
	require.Len(t, call["stream"], clip.MaxLogValue)
	require.Len(t, call["err"], clip.MaxLogValue, "an error is logged as its cut text")
	require.Len(t, call["names"], clip.MaxLogValue, "any other value that prints long too")
	require.Len(t, call["target"].(map[string]any)["group"], clip.MaxLogValue, "inside a group")
	require.InDelta(t, 3, call["count"], 0)
	require.Equal(t, "jobs", call["short"])
}

func TestHandlerPassesShortLinesAndOwnTextUnchanged(t *testing.T) {
	t.Parallel()
	stack := strings.Repeat("goroutine 1 [running]:\n", 100)
	line := logged(t, func(l *slog.Logger) {
		l.Error("panic in gRPC handler", "stack", clip.Own(stack), "err", errors.New("boom"), "names", []string{"a", "b"})
	})
	require.Equal(t, "panic in gRPC handler", line["msg"])
	require.Equal(t, stack, line["stack"], "a stack pelwarden took itself is logged whole")
	require.Equal(t, "boom", line["err"])
	require.Equal(t, []any{"a", "b"}, line["names"], "a short value keeps its kind")
}

func TestNewHandlerDoesNotWrapTwice(t *testing.T) {
	t.Parallel()
	h := clip.NewHandler(slog.NewTextHandler(&bytes.Buffer{}, nil))
	require.Same(t, h, clip.NewHandler(h))
}
