package kube

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestTrackerTrustsTheCacheOnlyBetweenAListAndAGap walks the tracker
// through the list and watch lifecycles the reflector goes through.
func TestTrackerTrustsTheCacheOnlyBetweenAListAndAGap(t *testing.T) {
	t.Parallel()
	gone := apierrors.NewResourceExpired("too old resource version")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("rbac"))
	type step func(tr *tracker, clock *time.Time)
	var (
		list      step = func(tr *tracker, _ *time.Time) { tr.listStarted() }
		replaced  step = func(tr *tracker, _ *time.Time) { tr.replaced() }
		open      step = func(tr *tracker, _ *time.Time) { tr.watchOpened() }
		closeW    step = func(tr *tracker, _ *time.Time) { tr.watchClosed(tr.watch) }
		expired   step = func(tr *tracker, _ *time.Time) { tr.watchError(tr.watch, gone) }
		refused   step = func(tr *tracker, _ *time.Time) { tr.failed(verbWatch, errConnRefused) }
		forbid    step = func(tr *tracker, _ *time.Time) { tr.failed(verbList, forbidden) }
		wait2s    step = func(_ *tracker, clock *time.Time) { *clock = clock.Add(2 * time.Second) }
		staleStop step = func(tr *tracker, _ *time.Time) { tr.watchClosed(tr.watch - 1) }
	)
	cases := map[string]struct {
		steps  []step
		want   State
		reason string
	}{
		"nothing listed yet":                             {nil, StateSyncing, "has not listed pods yet"},
		"a first list in flight":                         {[]step{list}, StateSyncing, "has not listed pods yet"},
		"listed and watching":                            {[]step{list, replaced, open}, StateCurrent, ""},
		"listed, watch not open yet":                     {[]step{list, replaced}, StateCurrent, ""},
		"watch ended cleanly, reopening within grace":    {[]step{list, replaced, open, closeW}, StateCurrent, ""},
		"watch ended cleanly and did not reopen":         {[]step{list, replaced, open, closeW, wait2s}, StateReconnecting, "has not reopened"},
		"watch reopened after a clean end":               {[]step{list, replaced, open, closeW, open}, StateCurrent, ""},
		"relist in flight after the watch ended":         {[]step{list, replaced, open, closeW, list}, StateRelisting, "listing pods again"},
		"the reopened watch expired (410)":               {[]step{list, replaced, open, closeW, open, expired}, StateFailing, "too old resource version"},
		"a list after a failure has not answered yet":    {[]step{list, replaced, open, refused, list}, StateFailing, "connection refused"},
		"a list after a failure replaced the cache":      {[]step{list, replaced, open, refused, list, replaced}, StateCurrent, ""},
		"RBAC refuses the list":                          {[]step{list, forbid}, StateForbidden, "forbidden: the ServiceAccount may not list pods in jobs (check rbac.namespaces)"},
		"the end of an older watch changes nothing":      {[]step{list, replaced, open, closeW, open, staleStop}, StateCurrent, ""},
		"an error of an older watch changes nothing":     {[]step{list, replaced, open, open, func(tr *tracker, _ *time.Time) { tr.watchError(1, gone) }}, StateCurrent, ""},
		"the failure is kept while a retry is in flight": {[]step{list, forbid, list}, StateForbidden, "forbidden"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := time.Unix(1000, 0)
			tr := newTracker(workers, func() time.Time { return clock }, time.Second, time.Second)
			for _, s := range tc.steps {
				s(tr, &clock)
			}
			got, why := tr.snapshot()
			require.Equal(t, tc.want, got)
			if tc.reason == "" {
				require.Empty(t, why)
				return
			}
			require.Contains(t, why, tc.reason)
		})
	}
}

// TestTrackerRelistsAtOnceAfterAnExpiredWatchButNotInALoop: a 410 skips
// the backoff once; a second within relistGap waits for it.
func TestTrackerRelistsAtOnceAfterAnExpiredWatchButNotInALoop(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1000, 0)
	tr := newTracker(workers, func() time.Time { return clock }, time.Second, 2*time.Second)
	expire := func() {
		tr.replaced()
		tr.watchError(tr.watchOpened(), apierrors.NewResourceExpired("too old resource version"))
	}
	require.False(t, tr.relistAtOnce(), "nothing expired yet")
	expire()
	require.True(t, tr.relistAtOnce())
	require.False(t, tr.relistAtOnce(), "once per expiry")
	expire()
	require.False(t, tr.relistAtOnce(), "a second expiry within relistGap waits for the backoff")
	clock = clock.Add(3 * time.Second)
	expire()
	require.True(t, tr.relistAtOnce())
	tr.watchError(tr.watchOpened(), errConnRefused)
	require.False(t, tr.relistAtOnce(), "only an expired watch skips the backoff")
}
