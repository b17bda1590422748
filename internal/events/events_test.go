package events

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var jobs = liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}

func event(g liveness.GroupRef, i int) Event {
	return Event{Time: time.Unix(int64(i), 0), Group: g, Consumer: "c" + strconv.Itoa(i), Action: redisx.Requeued, Entries: int64(i), Source: SourceHygiene}
}

func consumers(es []Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Consumer
	}
	return out
}

func TestRecentKeepsTheNewestEventsOfEachGroupNewestFirst(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		published int
		want      []string
	}{
		"none":             {0, nil},
		"fewer than kept":  {2, []string{"c1", "c0"}},
		"exactly kept":     {3, []string{"c2", "c1", "c0"}},
		"more than kept":   {5, []string{"c4", "c3", "c2"}},
		"wrapped twice on": {8, []string{"c7", "c6", "c5"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := NewBus(Options{Recent: 3}, prometheus.NewRegistry())
			other := liveness.GroupRef{Conn: "default", Stream: "other", Group: "workers"}
			for i := range tc.published {
				b.Publish(event(jobs, i))
				b.Publish(event(other, 100+i))
			}
			got := b.Recent(jobs)
			if tc.want == nil {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tc.want, consumers(got))
		})
	}
}

func TestTheQuietestGroupIsForgottenFirst(t *testing.T) {
	t.Parallel()
	b := NewBus(Options{Groups: 2}, prometheus.NewRegistry())
	a, c := liveness.GroupRef{Stream: "a"}, liveness.GroupRef{Stream: "c"}
	b.Publish(event(a, 1))
	b.Publish(event(jobs, 2))
	b.Publish(event(c, 3))
	require.Empty(t, b.Recent(a), "a was quiet longest")
	require.Len(t, b.Recent(jobs), 1)
	require.Len(t, b.Recent(c), 1)
}

func TestSubscribersGetOnlyTheirGroupsEvents(t *testing.T) {
	t.Parallel()
	b := NewBus(Options{}, prometheus.NewRegistry())
	mine, stopMine, err := b.Subscribe(func(g liveness.GroupRef) bool { return g == jobs })
	require.NoError(t, err)
	defer stopMine()
	all, stopAll, err := b.Subscribe(nil)
	require.NoError(t, err)
	defer stopAll()
	b.Publish(event(liveness.GroupRef{Stream: "other"}, 1))
	b.Publish(event(jobs, 2))
	require.Equal(t, "c2", (<-mine).Consumer)
	require.Equal(t, "c1", (<-all).Consumer)
	require.Equal(t, "c2", (<-all).Consumer)
}

// TestASlowSubscriberNeverBlocksThePublisher: the subscriber takes
// nothing; publishing goes on at once, and what did not fit is counted.
func TestASlowSubscriberNeverBlocksThePublisher(t *testing.T) {
	t.Parallel()
	b := NewBus(Options{Buffer: 4}, prometheus.NewRegistry())
	ch, stop, err := b.Subscribe(nil)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			b.Publish(event(jobs, i))
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	require.InDelta(t, 96, testutil.ToFloat64(b.dropped), 0, "all but the buffer's worth are dropped")
	stop()
	var got []string
	for e := range ch {
		got = append(got, e.Consumer)
	}
	require.Equal(t, []string{"c0", "c1", "c2", "c3"}, got, "the channel closes after what it holds")
	stop() // a second stop is harmless
	b.Publish(event(jobs, 200))
}

func TestANilBusAcceptsEverythingAndKeepsNothing(t *testing.T) {
	t.Parallel()
	var b *Bus
	b.Publish(event(jobs, 1))
	require.Empty(t, b.Recent(jobs))
}

func TestSubscriptionsPastTheCapAreRefusedAndCountedUntilOneEnds(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := NewBus(Options{Subscribers: 2}, reg)
	_, stopA, err := b.Subscribe(nil)
	require.NoError(t, err)
	_, stopB, err := b.Subscribe(nil)
	require.NoError(t, err)
	defer stopB()
	_, _, err = b.Subscribe(nil)
	require.ErrorIs(t, err, ErrTooManySubscribers)
	require.Contains(t, err.Error(), "2 are watching")
	require.InDelta(t, 1, testutil.ToFloat64(b.refused), 0, "the refusal is counted")
	stopA()
	_, stopC, err := b.Subscribe(nil)
	require.NoError(t, err, "a place freed is taken again")
	stopC()
}
