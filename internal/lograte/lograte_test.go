package lograte

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestARepeatedErrorIsLoggedFirstThenOncePerIntervalWithTheCountLeftOut(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	l := New(time.Minute, func() time.Time { return now })
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	for range 1000 {
		l.Log(context.Background(), log, slog.LevelWarn, "a", "scan failed")
		now = now.Add(100 * time.Millisecond) // 1000 lines over 100 s
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "the first line, then one a minute later")
	require.NotContains(t, lines[0], "suppressed")
	require.Contains(t, lines[1], "suppressed=599", "the lines left out in the minute in between")
}

func TestKeysAreLimitedApartAndForgottenKeysLogAtOnce(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	l := New(time.Minute, func() time.Time { return now })
	ok, _ := l.Allow("a")
	require.True(t, ok)
	ok, _ = l.Allow("b")
	require.True(t, ok, "another key is not held back by a")
	ok, _ = l.Allow("a")
	require.False(t, ok)
	l.Forget("a")
	require.Len(t, l.keys, 1, "a forgotten key holds nothing")
	ok, n := l.Allow("a")
	require.True(t, ok, "a forgotten key's next error is news")
	require.Zero(t, n)
}
