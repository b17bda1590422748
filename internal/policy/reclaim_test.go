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
		"reclaim off": {v(liveness.Ghost), time.Hour, off, false},
		"ghost with hard timeout uses the stale threshold only": {v(liveness.Ghost), 31 * time.Second, withHard, true},
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
		want      string
		ok        bool
	}{
		"excludes the owner":             {[]liveness.ConsumerView{c("owner", liveness.Alive, 0, 0), c("b", liveness.Alive, time.Second, 9)}, "b", true},
		"skips ghosts and unknowns":      {[]liveness.ConsumerView{c("g", liveness.Ghost, 0, 0), c("u", liveness.Unknown, 0, 0), c("a", liveness.Alive, 5*time.Second, 3)}, "a", true},
		"prefers the freshest heartbeat": {[]liveness.ConsumerView{c("old", liveness.Alive, 4*time.Second, 0), c("new", liveness.Alive, time.Second, 50)}, "new", true},
		"heartbeat beats none":           {[]liveness.ConsumerView{c("none", liveness.Alive, -1, 0), c("hb", liveness.Alive, 20*time.Second, 50)}, "hb", true},
		"then the fewest pending":        {[]liveness.ConsumerView{c("busy", liveness.Alive, -1, 9), c("idle", liveness.Alive, -1, 1)}, "idle", true},
		"ties broken by name":            {[]liveness.ConsumerView{c("b", liveness.Alive, -1, 1), c("a", liveness.Alive, -1, 1)}, "a", true},
		"no candidate":                   {[]liveness.ConsumerView{c("owner", liveness.Alive, 0, 0), c("g", liveness.Ghost, 0, 0)}, "", false},
		"empty group":                    {nil, "", false},
		"never a consumer whose pod is leaving": {[]liveness.ConsumerView{
			withPod(c("terminating", liveness.Alive, 0, 0), liveness.PodTerminating),
			withPod(c("gone-in-grace", liveness.Alive, 0, 0), liveness.PodGone),
			withPod(c("running", liveness.Alive, 9*time.Second, 7), liveness.PodRunning),
		}, "running", true},
	}
	for name, tc := range cases {
		got, ok := PickReclaimTarget(tc.consumers, "owner")
		require.Equal(t, tc.ok, ok, name)
		require.Equal(t, tc.want, got, name)
	}
}

func withPod(c liveness.ConsumerView, p liveness.PodState) liveness.ConsumerView {
	c.Pod = p
	return c
}
