package reclaim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func TestTheEngineRemembersItsClaimsForAnHourAndNoLonger(t *testing.T) {
	t.Parallel()
	e := &Engine{}
	start := time.Unix(1_800_000_000, 0)
	a, b := liveness.GroupRef{Stream: "a", Group: "g"}, liveness.GroupRef{Stream: "b", Group: "g"}
	e.moves.note(a, "w1", start)
	e.moves.note(b, "w2", start.Add(time.Minute))
	require.Equal(t, map[string]bool{"w1": true}, e.ClaimedTo(a, start))
	require.Empty(t, e.ClaimedTo(a, start.Add(time.Second)), "a claim before since is not counted")
	e.moves.note(b, "w3", start.Add(movesKept+2*time.Minute))
	require.NotContains(t, e.moves.to, a, "a group whose claims are all older than an hour is gone")
	require.Equal(t, map[string]bool{"w3": true}, e.ClaimedTo(b, start))
}
