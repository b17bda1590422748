package liveness

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// allOn is a spec with every source on, so every field counts in its key.
func allOn(t *testing.T) Spec {
	t.Helper()
	owner, err := ParseOwnerMatch("regex:^(?P<owner>.+)-[0-9]+$")
	require.NoError(t, err)
	return Spec{
		Idle: true, Heartbeat: true, Kubernetes: true, GhostIdle: time.Minute, HeartbeatKey: "hb:{owner}",
		HeartbeatMaxAge: 30 * time.Second, StartGrace: 10 * time.Second, Owner: owner,
		PodNamespace: "apps", PodSelector: "app=w", PodGrace: 2 * time.Second,
	}
}

// TestViewKeyChangesWithEverySpecFieldLikeTargetKey changes each field of
// Spec in turn: the view's key must change exactly when Target.Key does.
// A field added to Spec and left out of keyOf fails here, instead of
// letting two different specs share one snapshot.
func TestViewKeyChangesWithEverySpecFieldLikeTargetKey(t *testing.T) {
	t.Parallel()
	base := Target{GroupRef: GroupRef{Conn: "c", Stream: "s", Group: "g"}, Spec: allOn(t)}
	other, err := ParseOwnerMatch("prefix")
	require.NoError(t, err)
	changed := map[reflect.Kind]func(reflect.Value){
		reflect.Bool:   func(v reflect.Value) { v.SetBool(!v.Bool()) },
		reflect.Int64:  func(v reflect.Value) { v.SetInt(v.Int() + 1) },
		reflect.String: func(v reflect.Value) { v.SetString(v.String() + "x") },
		reflect.Struct: func(v reflect.Value) { v.Set(reflect.ValueOf(other)) },
	}
	st := reflect.TypeFor[Spec]()
	for i := range st.NumField() {
		f := st.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			mod := base
			set, ok := changed[f.Type.Kind()]
			require.True(t, ok, "Spec.%s is a %s: teach this test and keyOf about it", f.Name, f.Type)
			set(reflect.ValueOf(&mod.Spec).Elem().Field(i))
			require.NotEqual(t, base.Key(), mod.Key(), "Target.Key ignores Spec.%s", f.Name)
			require.NotEqual(t, keyOf(base), keyOf(mod), "keyOf ignores Spec.%s, which Target.Key counts", f.Name)
		})
	}
}

func TestViewKeyIgnoresTheSettingsOfASourceThatIsOffLikeTargetKey(t *testing.T) {
	t.Parallel()
	a := Target{GroupRef: GroupRef{Conn: "c", Stream: "s", Group: "g"}, Spec: Spec{Idle: true, GhostIdle: time.Minute}}
	b := a
	b.Spec.StartGrace, b.Spec.PodNamespace, b.Spec.PodSelector, b.Spec.PodGrace = time.Second, "apps", "app=w", time.Second
	require.Equal(t, a.Key(), b.Key())
	require.Equal(t, keyOf(a), keyOf(b))
	exact, err := ParseOwnerMatch("exact")
	require.NoError(t, err)
	b.Spec.Owner = exact
	require.Equal(t, a.Key(), b.Key(), "no ownerMatch is exact")
	require.Equal(t, keyOf(a), keyOf(b), "no ownerMatch is exact")
}

// TestATargetKeyGivesBackATargetWithTheSameKey: a holder keyed by a
// TargetKey keeps no copy of the target; the target the key gives back
// has every setting the key names, so its Key, spec text and labels are
// the original's.
func TestATargetKeyGivesBackATargetWithTheSameKey(t *testing.T) {
	t.Parallel()
	g := GroupRef{Conn: "c", Stream: "s", Group: "g"}
	all := Target{GroupRef: g, Spec: allOn(t)}
	require.Equal(t, all, all.Comparable().Target(), "with every source on, every field comes back")
	offSet := Target{GroupRef: g, Spec: Spec{Idle: true, GhostIdle: time.Minute, StartGrace: time.Second, PodNamespace: "apps", PodSelector: "app=w", PodGrace: time.Second}}
	for _, tg := range []Target{all, offSet, {GroupRef: g}} {
		k := tg.Comparable()
		back := k.Target()
		require.Equal(t, tg.Key(), back.Key())
		require.Equal(t, tg.Spec.String(), back.Spec.String())
		require.Equal(t, k, back.Comparable())
		require.Equal(t, g, k.Group())
	}
}

func TestCachedServesAFreshSnapshotWithoutAllocating(t *testing.T) {
	target := Target{GroupRef: GroupRef{Conn: "c", Stream: "s", Group: "g"}, Spec: allOn(t)}
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		return Observation{ServerTime: time.Now()}, nil
	}, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 1})
	_, ok, err := v.Cached(target)
	require.NoError(t, err)
	require.False(t, ok, "nothing read yet")
	first, err := v.Snapshot(context.Background(), target)
	require.NoError(t, err)
	var got *Snapshot
	allocs := testing.AllocsPerRun(100, func() { got, _, _ = v.Cached(target) })
	require.Same(t, first, got)
	require.Zero(t, allocs, "a poll served from a fresh snapshot allocates")
}

// TestReadKeyChangesOnlyWithWhatTheReadAsksRedisFor changes each field of
// Spec in turn, every source on: only the heartbeat keys read (the
// source, the pattern, and the owner match that fills an {owner}
// pattern) may part two targets' reads. A field added to Spec must be
// placed here, read or not.
func TestReadKeyChangesOnlyWithWhatTheReadAsksRedisFor(t *testing.T) {
	t.Parallel()
	read := map[string]bool{
		"Idle": false, "Heartbeat": true, "GhostIdle": false, "HeartbeatKey": true, "HeartbeatMaxAge": false,
		"StartGrace": false, "Owner": true, "Kubernetes": false, "PodNamespace": false, "PodSelector": false, "PodGrace": false,
	}
	base := Target{GroupRef: GroupRef{Conn: "c", Stream: "s", Group: "g"}, Spec: allOn(t)}
	other, err := ParseOwnerMatch("prefix")
	require.NoError(t, err)
	changed := map[reflect.Kind]func(reflect.Value){
		reflect.Bool:   func(v reflect.Value) { v.SetBool(!v.Bool()) },
		reflect.Int64:  func(v reflect.Value) { v.SetInt(v.Int() + 1) },
		reflect.String: func(v reflect.Value) { v.SetString(v.String() + "x") },
		reflect.Struct: func(v reflect.Value) { v.Set(reflect.ValueOf(other)) },
	}
	st := reflect.TypeFor[Spec]()
	for i := range st.NumField() {
		f := st.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			parts, ok := read[f.Name]
			require.True(t, ok, "Spec.%s: say whether the fetcher reads by it, and teach readKeyOf", f.Name)
			mod := base
			changed[f.Type.Kind()](reflect.ValueOf(&mod.Spec).Elem().Field(i))
			if parts {
				require.NotEqual(t, readKeyOf(base), readKeyOf(mod), "Spec.%s changes the read", f.Name)
			} else {
				require.Equal(t, readKeyOf(base), readKeyOf(mod), "Spec.%s changes nothing read", f.Name)
			}
		})
	}
}

// TestReadKeyIgnoresAnOwnerMatchNothingIsReadBy: an owner match parts two
// reads only where it names the heartbeat keys read ({owner}); with the
// idle source alone, or keys by {consumer}, a caller's regex variants all
// share one read.
func TestReadKeyIgnoresAnOwnerMatchNothingIsReadBy(t *testing.T) {
	t.Parallel()
	g := GroupRef{Conn: "c", Stream: "s", Group: "g"}
	a, err := ParseOwnerMatch("regex:^(?P<owner>.+)-[0-9]+$")
	require.NoError(t, err)
	b, err := ParseOwnerMatch("regex:^(?P<owner>.+)-[0-9]+$|x1")
	require.NoError(t, err)
	for name, spec := range map[string]Spec{
		"idle":                   {Idle: true, GhostIdle: time.Minute},
		"heartbeat {consumer}":   {Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: time.Minute},
		"kubernetes, no {owner}": {Kubernetes: true, PodNamespace: "apps", PodSelector: "app=w"},
	} {
		x, y := Target{GroupRef: g, Spec: spec}, Target{GroupRef: g, Spec: spec}
		x.Spec.Owner, y.Spec.Owner = a, b
		require.NotEqual(t, keyOf(x), keyOf(y), "%s: two targets", name)
		require.Equal(t, readKeyOf(x), readKeyOf(y), "%s: one read", name)
	}
	none := Target{GroupRef: g, Spec: Spec{Heartbeat: true, HeartbeatKey: "hb:{owner}", HeartbeatMaxAge: time.Minute}}
	x, y := none, none
	x.Spec.Owner, y.Spec.Owner = a, b
	require.NotEqual(t, readKeyOf(x), readKeyOf(y), "{owner}: the owner match names the keys read")
	exact, err := ParseOwnerMatch("exact")
	require.NoError(t, err)
	x.Spec.Owner = exact
	require.Equal(t, readKeyOf(none), readKeyOf(x), "no ownerMatch is exact")
}

// TestAPollAnsweredFromAFreshSnapshotAllocatesNothing: a poll learns the
// target's rhythm and sets its read ahead without allocating, whether it
// begins a poll or is the IsActive of one.
func TestAPollAnsweredFromAFreshSnapshotAllocatesNothing(t *testing.T) {
	target := Target{GroupRef: GroupRef{Conn: "c", Stream: "s", Group: "g"}, Spec: allOn(t)}
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		return Observation{ServerTime: time.Now()}, nil
	}, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 1, Now: clock.Now})
	_, err := v.PollWait(context.Background(), target)
	require.NoError(t, err)
	for _, step := range []time.Duration{0, 30 * time.Second} {
		allocs := testing.AllocsPerRun(100, func() {
			clock.advance(step)
			_, ok, _ := v.Poll(target)
			require.True(t, ok)
		})
		require.Zero(t, allocs, "a poll every %s allocates", step)
	}
}
