package findings

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestATrippedBreakerIsAFinding: a snapshot whose breaker holds consumers
// reports it, with what tripped it, and a breaker that never tripped
// reports nothing.
func TestATrippedBreakerIsAFinding(t *testing.T) {
	t.Parallel()
	tg := &liveness.Target{Spec: liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: time.Second}}
	at := time.Date(2026, 5, 16, 12, 0, 0, 0, time.UTC)
	s := &liveness.Snapshot{Target: tg, Breaker: &liveness.BreakerState{TrippedAt: at, Turned: 4, Of: 4, Held: 4, Source: liveness.SourceHeartbeat}}
	got := fromSnapshot(s)
	require.Len(t, got, 1)
	require.Equal(t, Disruption, got[0].Kind)
	require.Contains(t, got[0].Detail, "tripped at 2026-05-16T12:00:00Z: 4 of the 4 consumers Alive shortly before turned Ghost together on heartbeat")
	require.Empty(t, fromSnapshot(&liveness.Snapshot{Target: tg}), "no trip, no finding")
}
