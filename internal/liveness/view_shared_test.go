package liveness

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// thresholdTargets are n targets of one group that differ only in
// ghostIdle: 1s, 2s, ... ns.
func thresholdTargets(n int) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"},
			Spec: Spec{Idle: true, GhostIdle: time.Duration(i+1) * time.Second}}
	}
	return out
}

// countingFetch reads one consumer w idle 10.5s, counting the reads and
// keeping the targets it was asked for.
type countingFetch struct {
	reads atomic.Int64
	mu    sync.Mutex
	asked []Target
}

func (f *countingFetch) fetch(_ context.Context, t Target, _ []string) (Observation, error) {
	f.reads.Add(1)
	f.mu.Lock()
	f.asked = append(f.asked, t)
	f.mu.Unlock()
	time.Sleep(time.Millisecond) // callers arrive while the read runs
	return idleFor(10500 * time.Millisecond), nil
}

// TestTargetsDifferingOnlyInThresholdsShareOneReadAhead: 40 targets of
// one group, each with a ghostIdle of its own, are polled together every
// 100ms. Once their rhythm shows, the view reads the group ahead of the
// rounds of polls, once for all 40 (every target is judged from the
// read), and every poll is answered at once; each target is judged by its own
// threshold from the same read: w, idle 10.5s, is a Ghost under 1s to 10s
// and Alive under 11s to 40s.
func TestTargetsDifferingOnlyInThresholdsShareOneReadAhead(t *testing.T) {
	t.Parallel()
	const n, rounds = 40, 12
	f := &countingFetch{}
	var mu sync.Mutex
	refreshes := make(map[time.Duration]int)
	var failed atomic.Int64
	var byCause [4]atomic.Int64
	v := NewView(f.fetch, ViewOptions{Freshness: 200 * time.Millisecond, FetchTimeout: time.Second,
		Expiry: time.Hour, MaxTargets: n,
		OnRead: func(c ReadCause) { byCause[c].Add(1) },
		OnRefresh: func(t Target, _ *Snapshot, err error, _ time.Duration) {
			if err != nil {
				failed.Add(1)
			}
			mu.Lock()
			refreshes[t.Spec.GhostIdle]++
			mu.Unlock()
		}})
	targets := thresholdTargets(n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	waited := 0 // after the first round, which registers the targets
	for round := range rounds {
		for _, tg := range targets {
			_, ok, err := v.Poll(tg)
			require.NoError(t, err)
			if !ok {
				_, err = v.PollWait(ctx, tg)
				require.NoError(t, err)
				if round > 0 {
					waited++
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done

	require.Zero(t, failed.Load())
	// A round the machine delays past the read's freshness may wait once;
	// without reads ahead every round would.
	require.LessOrEqual(t, waited, 2, "after the first round, the polls are answered from the reads ahead")
	// A read serves the polls of the next Freshness: one ahead of every
	// other round.
	require.GreaterOrEqual(t, byCause[ReadAhead].Load(), int64(rounds/2-2), "the group is read ahead of the rounds")
	// The first round registers the targets while it reads: a read serves
	// the targets registered when it ends, so it takes log2(n) reads.
	require.LessOrEqual(t, f.reads.Load()-byCause[ReadPoll].Load(), int64(rounds), "one read a round serves all %d targets", n)
	mu.Lock()
	least := slices.Min(slicesOf(refreshes))
	mu.Unlock()
	require.GreaterOrEqual(t, least, rounds/2-2, "a read ahead judges every target of the group")
	for _, asked := range f.asked {
		require.Equal(t, Spec{}, asked.Spec, "the fetcher is asked for the group alone: no threshold changes what is read")
	}
	for _, tg := range targets {
		s, ok := v.Peek(tg)
		require.True(t, ok)
		want := Alive
		if tg.Spec.GhostIdle <= 10*time.Second {
			want = Ghost
		}
		require.Equal(t, want, s.Consumers[0].Verdict, "w idle 10.5s under ghostIdle %s", tg.Spec.GhostIdle)
	}
}

func slicesOf(m map[time.Duration]int) []int {
	out := make([]int, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

// TestTargetsWokenByOneEventShareOneReadAcrossThresholds: one XADD wakes
// 40 targets of one group that differ only in ghostIdle, each asking for
// a read begun after the event: one read answers all, and each gets its
// own verdicts from it.
func TestTargetsWokenByOneEventShareOneReadAcrossThresholds(t *testing.T) {
	t.Parallel()
	const n = 40
	f := &countingFetch{}
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: n})
	targets := thresholdTargets(n)
	ctx := context.Background()
	for _, tg := range targets {
		_, err := v.Pin(&tg)
		require.NoError(t, err)
	}
	event := time.Now()
	got := make([]*Snapshot, n)
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Go(func() {
			time.Sleep(time.Duration(i%8) * time.Millisecond) // some ask while the read runs, some after it
			s, err := v.RefreshSince(ctx, tg, event)
			require.NoError(t, err)
			got[i] = s
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), f.reads.Load(), "one read for %d targets woken by one event", n)
	for i, s := range got {
		require.Equal(t, targets[i].Spec, s.Target.Spec, "each target gets its own snapshot")
		want := Alive
		if targets[i].Spec.GhostIdle <= 10*time.Second {
			want = Ghost
		}
		require.Equal(t, want, s.Consumers[0].Verdict, "w idle 10.5s under ghostIdle %s", targets[i].Spec.GhostIdle)
	}
}

// TestATargetJoiningASharedReadKeepsItsOwnFirstSeen: the start grace
// counts from when a target first saw a consumer, not from when another
// target read alike did: a target registered later starts its own count,
// and the older one, settled from the later one's read without a read of
// its own, keeps its count.
func TestATargetJoiningASharedReadKeepsItsOwnFirstSeen(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var reads atomic.Int64
	fetch := func(context.Context, Target, []string) (Observation, error) {
		reads.Add(1)
		return idleFor(time.Second), nil
	}
	v := NewView(fetch, ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour,
		MaxTargets: 2, Now: func() time.Time { return now }})
	old, late := thresholdTargets(2)[0], thresholdTargets(2)[1]
	ctx := context.Background()
	_, err := v.Snapshot(ctx, old)
	require.NoError(t, err)
	now = now.Add(time.Minute)
	s, err := v.Snapshot(ctx, late)
	require.NoError(t, err)
	require.Equal(t, now, s.Consumers[0].FirstSeen, "the late target first saw w now")
	s, err = v.Snapshot(ctx, old)
	require.NoError(t, err)
	require.Equal(t, int64(2), reads.Load(), "the old target's snapshot, past MaxAge, comes from the late one's read")
	require.Equal(t, now, s.At)
	require.Equal(t, time.Unix(1000, 0), s.Consumers[0].FirstSeen, "the old target keeps its own first sight of w")
}

// TestPodSetsAddToOneSharedReadEachTheirOwnPods: three targets of one
// group with the kubernetes source, two on one pod set with thresholds
// of their own and one on another set, share one Redis read; the pods
// are looked up once per set, and each target is judged by its own set's
// pods: w's pod went in set a and runs in set b.
func TestPodSetsAddToOneSharedReadEachTheirOwnPods(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	f := &countingFetch{}
	var annotated []PodSet
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 3, Now: func() time.Time { return now },
		Annotate: func(t Target, obs *Observation) {
			annotated = append(annotated, t.Spec.PodSet())
			state := PodGone
			if t.Spec.PodSelector == "app=b" {
				state = PodRunning
			}
			obs.Pods = &PodsObs{ByName: map[string]PodObs{"w": {State: state, GoneAt: now.Add(-5 * time.Second), NameUnique: true}}}
		}})
	g := GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	pods := func(selector string, grace time.Duration) Target {
		return Target{GroupRef: g, Spec: Spec{Kubernetes: true, PodNamespace: "apps", PodSelector: selector, PodGrace: grace, GhostIdle: time.Hour}}
	}
	a1, a2, b := pods("app=a", time.Second), pods("app=a", 2*time.Second), pods("app=b", time.Second)
	for _, tg := range []Target{a1, a2, b} {
		_, err := v.Pin(&tg)
		require.NoError(t, err)
	}
	ctx := context.Background()
	_, err := v.Refresh(ctx, a1)
	require.NoError(t, err)
	for tg, want := range map[Target]Verdict{a1: Ghost, a2: Ghost, b: Alive} {
		s, err := v.Snapshot(ctx, tg)
		require.NoError(t, err)
		require.Equal(t, want, s.Consumers[0].Verdict, "w under %s: %v", tg.Spec.PodSelector, s.Consumers[0].Reasons)
	}
	require.Equal(t, int64(1), f.reads.Load(), "one read for three targets of one group")
	require.ElementsMatch(t, []PodSet{a1.Spec.PodSet(), b.Spec.PodSet()}, annotated, "the pods looked up once per set")
}

// TestAReadOneTargetAskedForIsJudgedForTheOthersOnlyWhenTheyAsk: a read
// one target of a thousand asks for (a new StreamIsActive stream, a poll)
// judges that target, and the one the hygiene loop holds, alone; each
// other target is judged from it when it asks, without a read of its
// own, and once all have, the reader keeps no observation beside their
// snapshots.
func TestAReadOneTargetAskedForIsJudgedForTheOthersOnlyWhenTheyAsk(t *testing.T) {
	t.Parallel()
	const n = 1000
	f := &countingFetch{}
	var refreshed atomic.Int64
	var hygiene atomic.Bool
	targets := thresholdTargets(n)
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: n,
		OnRefresh: func(t Target, _ *Snapshot, _ error, _ time.Duration) {
			refreshed.Add(1)
			hygiene.Store(hygiene.Load() || SameKey(t, targets[n-1]))
		}})
	for _, tg := range targets[:n-1] {
		_, ok, err := v.Cached(tg) // registered, not read
		require.NoError(t, err)
		require.False(t, ok)
	}
	_, err := v.Pin(&targets[n-1])
	require.NoError(t, err)
	ctx := context.Background()
	_, err = v.Refresh(ctx, targets[0])
	require.NoError(t, err)
	// The pinned target is judged once the read has answered its caller.
	require.Eventually(t, hygiene.Load, 5*time.Second, time.Millisecond, "the hygiene loop's target is judged from every read of its group")
	require.Equal(t, int64(2), refreshed.Load(), "the read judged the target that asked and the pinned one, not the %d others", n-2)
	r := v.groups[targets[0].GroupRef][0]
	require.NotNil(t, r.latest, "the read is kept for the others")
	for i, tg := range targets[1 : n-1] {
		_, ok := v.Peek(tg)
		require.False(t, ok, "not judged before it asks")
		if i%2 == 0 {
			_, ok, err := v.Cached(tg)
			require.NoError(t, err)
			require.True(t, ok, "a poll is answered from the latest read")
		} else {
			_, err = v.Snapshot(ctx, tg)
			require.NoError(t, err)
		}
	}
	require.Equal(t, int64(1), f.reads.Load(), "every other target judged from the one read")
	require.Equal(t, int64(n), refreshed.Load(), "each judged once")
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Nil(t, r.latest, "taken by all: no observation kept beside the snapshots")
}
