package app

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestTheHPAsOnThePlaceholderAreNamedBoundedAndForgotten: a ScaledObject
// whose HPA asks for the placeholder of a served trigger is named, its
// namespace and name escaped; at most 100 are named however many ask, and
// each is forgotten 10 minutes after its last ask.
func TestTheHPAsOnThePlaceholderAreNamedBoundedAndForgotten(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	p := newPlaceholderHPAs(reg)
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	p.now = clock.Now
	p.asked("apps", "worker\u202e")
	got, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, `worker\u{202e}~`, got[0].GetMetric()[0].GetLabel()[0].GetValue()[:len(`worker\u{202e}~`)], "the name is escaped")
	for i := range 150 {
		p.asked("flood", fmt.Sprint(i))
	}
	require.Equal(t, maxPlaceholderHPAs, testutil.CollectAndCount(p), "at most 100 are named")
	clock.Add(placeholderMemory + time.Second)
	p.asked("apps", "other")
	require.Equal(t, 1, testutil.CollectAndCount(p), "the others were forgotten 10 minutes after their last ask")
}
