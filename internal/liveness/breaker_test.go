package liveness

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// round is one refresh of a group of workers w0..wN: when each worker's
// heartbeat was written, on Redis's clock from the first round (noKey: no
// key), and whose pods went. A value written at the same time in two
// rounds is the same value, unchanged: a silent worker's.
type round struct {
	at    time.Duration // after the first round
	beats []time.Duration
	gone  []bool
}

const noKey = time.Duration(math.MinInt64)

// judgeRounds builds a snapshot per round, each against the one before,
// with max age 5s, and returns the last.
func judgeRounds(t *testing.T, rounds []round, b Breaker) *Snapshot {
	t.Helper()
	spec := heartbeatSpec()
	if rounds[0].gone != nil {
		spec.Kubernetes, spec.PodNamespace, spec.PodSelector = true, "jobs", "app=w"
	}
	target := &Target{GroupRef: GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: spec}
	local := time.Unix(1_700_000_000, 0)
	var prev *Snapshot
	for _, r := range rounds {
		server := serverNow.Add(r.at)
		obs := Observation{ServerTime: server, LagValid: true, PendingByConsumer: map[string]int64{}, Heartbeats: map[string]HeartbeatObs{}}
		if r.gone != nil {
			obs.Pods = &PodsObs{ByName: map[string]PodObs{}}
		}
		for i, written := range r.beats {
			name := "w" + strconv.Itoa(i)
			obs.Consumers = append(obs.Consumers, ConsumerObs{Name: name, Idle: time.Hour, Inactive: -1})
			obs.PendingByConsumer[name] = 2
			obs.Heartbeats["hb:"+name] = HeartbeatObs{}
			if written != noKey {
				obs.Heartbeats["hb:"+name] = HeartbeatObs{Exists: true, Value: strconv.FormatInt(serverNow.Add(written).UnixMilli(), 10)}
			}
			if r.gone != nil {
				p := PodObs{State: PodRunning}
				if r.gone[i] {
					p = PodObs{State: PodGone, GoneAt: local.Add(r.at - time.Second), NameUnique: true}
				}
				obs.Pods.ByName[name] = p
			}
		}
		prev = BuildWith(target, obs, prev, local.Add(r.at), b)
	}
	return prev
}

// TestDisruptionBreaker walks the breaker's table: who trips it, who it
// holds, who it never holds, and when it lets go.
func TestDisruptionBreaker(t *testing.T) {
	t.Parallel()
	s := time.Second
	// Fresh at the first round (4s old, max age 5s), stale by 2s when no
	// beat follows; at(d) is a beat d after the first round.
	old := -4 * s
	fresh4 := []time.Duration{old, old, old, old}
	silent4 := fresh4
	at := func(d time.Duration) time.Duration { return d }
	cases := map[string]struct {
		rounds  []round
		breaker Breaker
		want    string // verdicts of w0.., A/G/U
		tripped bool
		held    int
	}{
		"every worker's heartbeat goes stale at once: all held Unknown": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil}},
			want:   "UUUU", tripped: true, held: 4,
		},
		"every worker's key expires at once: the same evidence, held": {
			rounds: []round{{0, fresh4, nil}, {2 * s, []time.Duration{noKey, noKey, noKey, old}, nil}},
			want:   "UUUU", tripped: true, held: 4,
		},
		"one of four dies: a death, not a disruption": {
			rounds: []round{{0, fresh4, nil}, {2 * s, []time.Duration{old, at(1500 * time.Millisecond), at(1500 * time.Millisecond), at(1500 * time.Millisecond)}, nil}},
			want:   "GAAA",
		},
		"two of two die: fewer than minConsumers": {
			rounds: []round{{0, []time.Duration{old, old}, nil}, {2 * s, []time.Duration{old, old}, nil}},
			want:   "GG",
		},
		"three of five die together: past the fraction": {
			rounds: []round{{0, []time.Duration{old, old, old, old, old}, nil}, {2 * s, []time.Duration{old, old, old, at(s), at(s)}, nil}},
			want:   "UUUAA", tripped: true, held: 3,
		},
		"three of six die together: below the fraction": {
			rounds: []round{{0, []time.Duration{old, old, old, old, old, old}, nil}, {2 * s, []time.Duration{old, old, old, at(s), at(s), at(s)}, nil}},
			want:   "GGGAAA",
		},
		"stale ones turning over three refreshes within a max age count together": {
			rounds: []round{{0, []time.Duration{old, -2500 * time.Millisecond, -1500 * time.Millisecond, -s}, nil},
				{2 * s, []time.Duration{old, -2500 * time.Millisecond, -1500 * time.Millisecond, at(1500 * time.Millisecond)}, nil},
				{3 * s, []time.Duration{old, -2500 * time.Millisecond, -1500 * time.Millisecond, at(2500 * time.Millisecond)}, nil},
				{4 * s, []time.Duration{old, -2500 * time.Millisecond, -1500 * time.Millisecond, at(3500 * time.Millisecond)}, nil}},
			want: "UUUA", tripped: true, held: 3,
		},
		"dead long before: a ghost for longer than the window does not count": {
			rounds: []round{{0, []time.Duration{-s, -s, -7 * s, -7 * s}, nil}, {10 * s, []time.Duration{-s, -s, -7 * s, -7 * s}, nil}},
			want:   "GGGG",
		},
		"pods deleted at once: corroborated deaths go through": {
			rounds: []round{{0, fresh4, []bool{false, false, false, false}}, {2 * s, silent4, []bool{true, true, true, true}}},
			want:   "GGGG",
		},
		"pods of three deleted, the fourth stale with its pod running: only the fourth could be held, too few": {
			rounds: []round{{0, fresh4, []bool{false, false, false, false}}, {2 * s, silent4, []bool{true, true, true, false}}},
			want:   "GGGG",
		},
		"a held worker beats again: Alive on its own evidence": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil}, {3 * s, []time.Duration{at(2500 * time.Millisecond), old, old, old}, nil}},
			want:   "AUUU", tripped: true, held: 3,
		},
		"silence goes on: still held a minute later": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil}, {60 * s, silent4, nil}},
			want:   "UUUU", tripped: true, held: 4,
		},
		"evidence written after the trip lets go; the held stay Unknown one more max age": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil},
				{3 * s, []time.Duration{at(2500 * time.Millisecond), old, old, old}, nil}, {7 * s, []time.Duration{at(6500 * time.Millisecond), old, old, old}, nil}},
			want: "AUUU", tripped: true, held: 3,
		},
		"a max age after letting go, the still silent are Ghost, without tripping again": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil},
				{3 * s, []time.Duration{at(2500 * time.Millisecond), old, old, old}, nil}, {8 * s, []time.Duration{at(7500 * time.Millisecond), old, old, old}, nil},
				{9 * s, []time.Duration{at(8500 * time.Millisecond), old, old, old}, nil}},
			want: "AGGG",
		},
		"a new worker that beats after the trip lets go too": {
			rounds: []round{{0, fresh4, nil}, {2 * s, silent4, nil},
				{3 * s, []time.Duration{old, old, old, old, at(2500 * time.Millisecond)}, nil}, {9 * s, []time.Duration{old, old, old, old, at(8500 * time.Millisecond)}, nil}},
			want: "GGGGA",
		},
		"a stricter breaker (all of them) does not trip on three of four": {
			rounds:  []round{{0, fresh4, nil}, {2 * s, []time.Duration{old, old, old, at(s)}, nil}},
			breaker: Breaker{Fraction: 1, MinConsumers: 3},
			want:    "GGGA",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := tc.breaker
			if b == (Breaker{}) {
				b = DefaultBreaker
			}
			snap := judgeRounds(t, tc.rounds, b)
			got, pending := "", int64(0)
			for _, c := range snap.Consumers {
				got += c.Verdict.String()[:1]
				require.Equal(t, c.Held, c.Verdict == Unknown, "%s: only the breaker makes these consumers Unknown: %s", c.Name, ReasonsString(c.Reasons))
				if c.Verdict != Ghost {
					pending += c.Pending
				}
			}
			require.Equal(t, tc.want, got, "verdicts of w0..")
			require.Equal(t, tc.tripped, snap.BreakerState().Tripped(), "tripped")
			require.Equal(t, tc.held, snap.BreakerState().Held, "held")
			require.Equal(t, pending, snap.LivePending, "the held count as live")
		})
	}
}

func TestAHeldConsumerSaysWhyAndUntilWhen(t *testing.T) {
	t.Parallel()
	s := time.Second
	old := -4 * s
	snap := judgeRounds(t, []round{{0, []time.Duration{old, old, old}, nil}, {2 * s, []time.Duration{old, old, old}, nil}}, DefaultBreaker)
	require.Contains(t, ReasonsString(snap.Consumers[0].Reasons), "disruption breaker: 3 of the 3 consumers Alive within 5s turned Ghost together on heartbeat evidence")
	snap = judgeRounds(t, []round{{0, []time.Duration{old, old, old, old}, nil}, {2 * s, []time.Duration{old, old, old, old}, nil},
		{3 * s, []time.Duration{2500 * time.Millisecond, old, old, old}, nil}}, DefaultBreaker)
	require.Contains(t, ReasonsString(snap.Consumers[1].Reasons), "let go at")
}

// TestIdleOnlyGroupTripsWhenEveryReaderFallsSilent: with idle alone, a
// group whose readers all stop at once (a long job each, or a network
// cut) is held, and a read after the trip lets go.
func TestIdleOnlyGroupTripsWhenEveryReaderFallsSilent(t *testing.T) {
	t.Parallel()
	target := &Target{Spec: idleSpec()}
	local := time.Unix(1_700_000_000, 0)
	obs := func(at time.Duration, idle ...time.Duration) Observation {
		o := Observation{ServerTime: serverNow.Add(at), LagValid: true, PendingByConsumer: map[string]int64{}}
		for i, d := range idle {
			o.Consumers = append(o.Consumers, ConsumerObs{Name: "w" + strconv.Itoa(i), Idle: d, Inactive: -1})
		}
		return o
	}
	m := time.Minute
	s1 := Build(target, obs(0, 50*time.Second, 50*time.Second, 50*time.Second), nil, local)
	s2 := Build(target, obs(20*time.Second, 70*time.Second, 70*time.Second, 70*time.Second), s1, local.Add(20*time.Second))
	require.True(t, s2.BreakerState().Tripped())
	require.Equal(t, 3, s2.BreakerState().Held)
	s3 := Build(target, obs(21*time.Second, 0, 71*time.Second, 71*time.Second), s2, local.Add(21*time.Second))
	require.False(t, s3.BreakerState().ReleasedAt.IsZero(), "a read after the trip lets go")
	s4 := Build(target, obs(21*time.Second+m, 0, 71*time.Second+m, 71*time.Second+m), s3, local.Add(21*time.Second+m))
	require.False(t, s4.BreakerState().Tripped())
	require.Equal(t, 2, s4.GhostConsumers, "judged on their own evidence a ghostIdle after letting go")
}
