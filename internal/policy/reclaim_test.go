package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

var requeueStale = Hygiene{Mode: ReclaimRequeue, EntryStale: 30 * time.Second, DeleteGhostConsumers: true}

func TestReclaimThresholdSaysWhichEntriesMayBeTaken(t *testing.T) {
	t.Parallel()
	withHard := requeueStale
	withHard.HardTimeout = 10 * time.Minute
	off := requeueStale
	off.Mode = ReclaimOff
	now := time.Unix(1_800_000_000, 0)
	v := func(verdict liveness.Verdict) liveness.ConsumerView { return liveness.ConsumerView{Verdict: verdict} }
	podGone := liveness.ConsumerView{Verdict: liveness.Ghost, GoneAt: now.Add(-3 * time.Second)}
	podLongGone := liveness.ConsumerView{Verdict: liveness.Ghost, GoneAt: now.Add(-time.Hour)}
	cases := map[string]struct {
		owner liveness.ConsumerView
		idle  time.Duration
		h     Hygiene
		want  bool
	}{
		"ghost whose pod went: an entry idle since before it went":            {podGone, 4 * time.Second, requeueStale, true},
		"ghost whose pod went: an entry delivered after it went is not taken": {podGone, 2 * time.Second, requeueStale, false},
		"ghost whose pod went long ago: a stale entry is taken":               {podLongGone, 31 * time.Second, requeueStale, true},
		"ghost whose pod went long ago: the stale threshold still caps it":    {podLongGone, 29 * time.Second, requeueStale, false},
		"ghost owner, stale entry":                                            {v(liveness.Ghost), 31 * time.Second, requeueStale, true},
		"ghost owner, entry not stale yet":                                    {v(liveness.Ghost), 29 * time.Second, requeueStale, false},
		"alive owner, no hard timeout, ten times stale":                       {v(liveness.Alive), 300 * time.Second, requeueStale, false},
		"alive owner past the hard timeout":                                   {v(liveness.Alive), 11 * time.Minute, withHard, true},
		"alive owner below the hard timeout":                                  {v(liveness.Alive), 9 * time.Minute, withHard, false},
		"unknown owner is never reclaimed, even past hard":                    {v(liveness.Unknown), time.Hour, withHard, false},
		"degraded owner, stale entry":                                         {v(liveness.Degraded), 31 * time.Second, requeueStale, true},
		"degraded owner, entry not stale yet":                                 {v(liveness.Degraded), 29 * time.Second, requeueStale, false},
		"degraded owner with a hard timeout uses the stale threshold":         {v(liveness.Degraded), 31 * time.Second, withHard, true},
		"degraded owner with reclaim off":                                     {v(liveness.Degraded), time.Hour, off, false},
		"reclaim off":                                                         {v(liveness.Ghost), time.Hour, off, false},
		"ghost with hard timeout uses the stale threshold only":               {v(liveness.Ghost), 31 * time.Second, withHard, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			threshold, ok := ReclaimThreshold(tc.owner, tc.h, now)
			require.Equal(t, tc.want, ok && tc.idle >= threshold, "threshold %s, reclaimable %t", threshold, ok)
		})
	}
}

func TestShouldDeadLetter(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		deliveries, max int64
		want            bool
	}{
		"off":               {100, 0, false},
		"below":             {2, 3, false},
		"at the maximum":    {3, 3, true},
		"past the maximum":  {7, 3, true},
		"first delivery, 1": {1, 1, true},
	}
	for name, tc := range cases {
		require.Equal(t, tc.want, ShouldDeadLetter(tc.deliveries, tc.max), name)
	}
}

func TestShouldDeleteConsumer(t *testing.T) {
	t.Parallel()
	ghost := liveness.ConsumerView{Name: "g", Verdict: liveness.Ghost, Idle: time.Hour}
	noDelete := requeueStale
	noDelete.DeleteGhostConsumers = false
	cases := map[string]struct {
		c    liveness.ConsumerView
		h    Hygiene
		want bool
	}{
		"ghost, empty PEL, idle":   {ghost, requeueStale, true},
		"ghost with pending":       {liveness.ConsumerView{Verdict: liveness.Ghost, Pending: 1, Idle: time.Hour}, requeueStale, false},
		"ghost read recently":      {liveness.ConsumerView{Verdict: liveness.Ghost, Idle: time.Second}, requeueStale, false},
		"alive, empty PEL":         {liveness.ConsumerView{Verdict: liveness.Alive, Idle: time.Hour}, requeueStale, false},
		"unknown, empty PEL":       {liveness.ConsumerView{Verdict: liveness.Unknown, Idle: time.Hour}, requeueStale, false},
		"deleting turned off":      {ghost, noDelete, false},
		"reclaim off deletes none": {ghost, Hygiene{Mode: ReclaimOff, DeleteGhostConsumers: true}, false},
	}
	for name, tc := range cases {
		require.Equal(t, tc.want, ShouldDeleteConsumer(tc.c, time.Minute, tc.h), name)
	}
}

func TestPickReclaimTarget(t *testing.T) {
	t.Parallel()
	c := func(name string, v liveness.Verdict, hb time.Duration, pending int64) liveness.ConsumerView {
		return liveness.ConsumerView{Name: name, Verdict: v, HeartbeatAge: hb, Pending: pending}
	}
	cases := map[string]struct {
		consumers []liveness.ConsumerView
		claimed   map[string]int64
		want      string
		ok        bool
	}{
		"excludes the owner":             {consumers: []liveness.ConsumerView{c("owner", liveness.Alive, 0, 0), c("b", liveness.Alive, time.Second, 9)}, want: "b", ok: true},
		"skips ghosts and unknowns":      {consumers: []liveness.ConsumerView{c("g", liveness.Ghost, 0, 0), c("u", liveness.Unknown, 0, 0), c("a", liveness.Alive, 5*time.Second, 3)}, want: "a", ok: true},
		"never a degraded consumer":      {consumers: []liveness.ConsumerView{c("d", liveness.Degraded, 0, 0), c("a", liveness.Alive, 5*time.Second, 30)}, want: "a", ok: true},
		"prefers the freshest heartbeat": {consumers: []liveness.ConsumerView{c("old", liveness.Alive, 4*time.Second, 0), c("new", liveness.Alive, time.Second, 50)}, want: "new", ok: true},
		"heartbeat beats none":           {consumers: []liveness.ConsumerView{c("none", liveness.Alive, -1, 0), c("hb", liveness.Alive, 20*time.Second, 50)}, want: "hb", ok: true},
		"then the fewest pending":        {consumers: []liveness.ConsumerView{c("busy", liveness.Alive, -1, 9), c("idle", liveness.Alive, -1, 1)}, want: "idle", ok: true},
		"ties broken by name":            {consumers: []liveness.ConsumerView{c("b", liveness.Alive, -1, 1), c("a", liveness.Alive, -1, 1)}, want: "a", ok: true},
		"the scan's claims so far come before freshness": {
			consumers: []liveness.ConsumerView{c("fresh", liveness.Alive, 0, 0), c("older", liveness.Alive, 3*time.Second, 0)},
			claimed:   map[string]int64{"fresh": 10}, want: "older", ok: true,
		},
		"equal claims fall back to the freshest heartbeat": {
			consumers: []liveness.ConsumerView{c("fresh", liveness.Alive, 0, 0), c("older", liveness.Alive, 3*time.Second, 0)},
			claimed:   map[string]int64{"fresh": 4, "older": 4}, want: "fresh", ok: true,
		},
		"no candidate": {consumers: []liveness.ConsumerView{c("owner", liveness.Alive, 0, 0), c("g", liveness.Ghost, 0, 0), c("d", liveness.Degraded, 0, 0)}, want: "", ok: false},
		"empty group":  {consumers: nil, want: "", ok: false},
		"never a consumer whose pod is leaving": {consumers: []liveness.ConsumerView{
			withPod(c("terminating", liveness.Alive, 0, 0), liveness.PodTerminating),
			withPod(c("gone-in-grace", liveness.Alive, 0, 0), liveness.PodGone),
			withPod(c("running", liveness.Alive, 9*time.Second, 7), liveness.PodRunning),
		}, want: "running", ok: true},
	}
	for name, tc := range cases {
		got, ok := PickReclaimTarget(tc.consumers, "owner", tc.claimed)
		require.Equal(t, tc.ok, ok, name)
		require.Equal(t, tc.want, got, name)
	}
}

// TestClaimTallySpreadsOneScansClaims: three owners' entries go to three
// live consumers, freshest first; the fourth goes to the one given least.
func TestClaimTallySpreadsOneScansClaims(t *testing.T) {
	t.Parallel()
	group := []liveness.ConsumerView{
		{Name: "a", Verdict: liveness.Alive, HeartbeatAge: 0},
		{Name: "b", Verdict: liveness.Alive, HeartbeatAge: time.Second},
		{Name: "c", Verdict: liveness.Alive, HeartbeatAge: 2 * time.Second},
		{Name: "g1", Verdict: liveness.Ghost, Pending: 9},
		{Name: "g2", Verdict: liveness.Ghost, Pending: 2},
		{Name: "g3", Verdict: liveness.Degraded, Pending: 5},
		{Name: "g4", Verdict: liveness.Ghost, Pending: 1},
	}
	tally := ClaimTally{}
	var got []string
	for _, owner := range []string{"g1", "g2", "g3", "g4"} {
		to, ok := tally.Pick(group, owner)
		require.True(t, ok)
		got = append(got, to)
	}
	require.Equal(t, []string{"a", "b", "c", "b"}, got, "g4 goes to b, which was given 2, not a (9) or c (5)")
	require.Equal(t, ClaimTally{"a": 9, "b": 3, "c": 5}, tally)

	var none ClaimTally
	to, ok := none.Pick(group, "g1")
	require.True(t, ok)
	require.Equal(t, "a", to, "a nil tally picks without spreading")
}

func withPod(c liveness.ConsumerView, p liveness.PodState) liveness.ConsumerView {
	c.Pod = p
	return c
}
