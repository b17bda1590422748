package liveness

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// clockRead is one read of consumer w's heartbeat hb:w, d after the first
// read on both clocks: the value it holds (empty: no key), and w's idle.
// The skew measured is at least what it is: a value that changed was
// written after the read before, which may be later than its worker wrote.
type clockRead struct {
	d     time.Duration
	value string
	idle  time.Duration
}

// judgeClock builds a snapshot per read of w, each against the one
// before (max age 5s), and returns them.
func judgeClock(t *testing.T, reads ...clockRead) []*Snapshot {
	t.Helper()
	target := &Target{GroupRef: GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: heartbeatSpec()}
	local := time.Unix(1_700_000_000, 0)
	var prev *Snapshot
	var out []*Snapshot
	for _, r := range reads {
		// x beats throughout: the group has heartbeat records.
		obs := Observation{ServerTime: serverNow.Add(r.d), LagValid: true,
			Consumers:         []ConsumerObs{{Name: "w", Idle: r.idle, Inactive: -1}, {Name: "x", Inactive: -1}},
			PendingByConsumer: map[string]int64{"w": 3},
			Heartbeats:        map[string]HeartbeatObs{"hb:w": {}, "hb:x": {Exists: true, Value: claims(r.d)}},
		}
		if r.value != "" {
			obs.Heartbeats["hb:w"] = HeartbeatObs{Exists: true, Value: r.value}
		}
		prev = Build(target, obs, prev, local.Add(r.d))
		out = append(out, prev)
	}
	return out
}

// claims is a heartbeat value claiming serverNow+d, in milliseconds.
func claims(d time.Duration) string { return strconv.FormatInt(serverNow.Add(d).UnixMilli(), 10) }

func TestAHeartbeatIsJudgedOnRedisClock(t *testing.T) {
	t.Parallel()
	s := time.Second
	behind := func(d time.Duration) string { return claims(d - 30*s) }
	ahead := func(d time.Duration) string { return claims(d + 30*s) }
	cases := map[string]struct {
		reads []clockRead
		want  Verdict
		rule  string
		// skew is the measured skew, to the second.
		skew time.Duration
	}{
		"a clock 30s behind whose value changes at every read is Alive, its skew measured": {
			// From pelwarden's start its first reads are Unknown (the
			// outage rule); here it is past that.
			reads: []clockRead{{0, behind(0), 0}, {s, behind(s), 0}, {2 * s, behind(2 * s), 0}, {9 * s, behind(9 * s), 0}, {10 * s, behind(10 * s), 0}},
			want:  Alive, rule: "fresh", skew: -29 * s,
		},
		"a clock 30s behind that stops beating is stale a max age after the read that saw its last value": {
			reads: []clockRead{{0, behind(0), 0}, {s, behind(s), 0}, {6 * s, behind(s), 5 * s}, {6*s + time.Millisecond, behind(s), 5 * s}},
			want:  Ghost, rule: "heartbeat-stale", skew: -29 * s,
		},
		"... and not a moment before": {
			reads: []clockRead{{0, behind(0), 0}, {s, behind(s), 0}, {6 * s, behind(s), 5 * s}},
			want:  Alive, rule: "fresh", skew: -29 * s,
		},
		"a value dated past the max age, read for the first time while its name is read, is Unknown": {
			reads: []clockRead{{0, behind(0), 0}, {4 * s, behind(0), 0}},
			want:  Unknown, rule: "heartbeat-first-read",
		},
		"the same value read unchanged for a max age is stale for sure": {
			reads: []clockRead{{0, behind(0), 0}, {5 * s, behind(0), 0}},
			want:  Ghost, rule: "heartbeat-stale",
		},
		"a value dated past the max age of a name nobody read lately is stale at its first read": {
			reads: []clockRead{{0, behind(0), time.Hour}},
			want:  Ghost, rule: "heartbeat-stale",
		},
		"a key that vanished after a beat is judged as that beat": {
			reads: []clockRead{{0, claims(-s), 0}, {2 * s, "", 6 * s}},
			want:  Unknown, rule: "heartbeat-vanished",
		},
		"... which is stale a max age after it": {
			reads: []clockRead{{0, claims(-s), 0}, {2 * s, "", 6 * s}, {4*s + time.Millisecond, "", 8 * s}},
			want:  Ghost, rule: "heartbeat-missing",
		},
		"a correct clock's beat keeps its own time": {
			reads: []clockRead{{0, claims(-s), 0}, {2 * s, claims(500 * time.Millisecond), 0}, {5*s + 600*time.Millisecond, claims(500 * time.Millisecond), 0}},
			want:  Ghost, rule: "heartbeat-stale",
		},
		"a time in whole seconds cut to just before the last read is a beat just after it, not skew": {
			reads: []clockRead{{0, claims(-s), 0}, {1500 * time.Millisecond, strconv.FormatInt(serverNow.Add(1500*time.Millisecond).Unix(), 10), 0}},
			want:  Alive, rule: "fresh",
		},
		"a clock 30s ahead is not trusted, however it changes": {
			reads: []clockRead{{0, ahead(0), 0}, {s, ahead(s), 0}, {2 * s, ahead(2 * s), 0}},
			want:  Unknown, rule: "heartbeat-future",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			snaps := judgeClock(t, tc.reads...)
			cv := snaps[len(snaps)-1].Consumers[0]
			require.Equal(t, tc.want, cv.Verdict, ReasonsString(cv.Reasons))
			require.Equal(t, tc.rule, cv.Rule(), ReasonsString(cv.Reasons))
			require.Equal(t, tc.skew, cv.ClockSkew.Truncate(s), "skew")
			last := snaps[len(snaps)-1]
			require.Equal(t, tc.skew != 0, last.SkewedClocks == 1, "counted as a skewed clock")
			require.Equal(t, tc.skew, last.ClockSkew.Truncate(s), "the target's largest skew")
		})
	}
}

// TestWhatASnapshotKeepsOfABeatIsBounded: a snapshot remembers a beat by
// hashes and times, 40 bytes, never the value, whatever its size (up to
// maxBeatLen): two values differing in their last byte are told apart.
func TestWhatASnapshotKeepsOfABeatIsBounded(t *testing.T) {
	t.Parallel()
	require.Equal(t, uintptr(40), unsafe.Sizeof(beatMemo{}), "hashes and times only")
	pad := strings.Repeat("x", maxBeatLen-100)
	value := func(end string) string { return `{"time":` + claims(0) + `,"pad":"` + pad + end + `"}` }
	snaps := judgeClock(t, clockRead{0, value("a"), 0}, clockRead{time.Second, value("b"), 0}, clockRead{10 * time.Second, value("b"), 0})
	require.Equal(t, Alive, snaps[1].Consumers[0].Verdict, "a value that changed in its last byte is a beat")
	require.Equal(t, Ghost, snaps[2].Consumers[0].Verdict, "the same value read again is not")
}
