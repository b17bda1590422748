package findings

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// TestWhatCouldNotBeWrittenAndSkewedClocksAreFindings: a snapshot whose
// read met a node refusing writes, consumers held Unknown for it or for
// an eviction, and a worker whose clock is off, reports each; a healthy
// one none of them.
func TestWhatCouldNotBeWrittenAndSkewedClocksAreFindings(t *testing.T) {
	t.Parallel()
	tg := &liveness.Target{Spec: liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: time.Second}}
	s := &liveness.Snapshot{Target: tg, Refused: liveness.RefusalOOM, RefusedConsumers: 3, EvictedConsumers: 1,
		Consumers: []liveness.ConsumerView{{Name: "w-0", Owner: "w-0", ClockSkew: -30 * time.Second}, {Name: "w-1", Owner: "w-1", ClockSkew: 2 * time.Second}}}
	got := fromSnapshot(s)
	require.Len(t, ofKind(got, WritesRefused), 1)
	require.Contains(t, ofKind(got, WritesRefused)[0].Detail, "Redis refuses writes (OOM: used memory is above maxmemory")
	require.Contains(t, ofKind(got, WritesRefused)[0].Detail, "3 consumers")
	require.Len(t, ofKind(got, HeartbeatsEvicted), 1)
	skew := ofKind(got, ClockSkew)
	require.Len(t, skew, 1, "a skew within the tolerance is no finding")
	require.Equal(t, "w-0", skew[0].Consumer)
	require.Contains(t, skew[0].Detail, "at least 30s behind Redis's")
	require.Equal(t, "clock-skew", ClockSkew.String())

	healthy := &liveness.Snapshot{Target: tg, Consumers: []liveness.ConsumerView{{Name: "w-0", Owner: "w-0"}}}
	require.Empty(t, fromSnapshot(healthy))
}
