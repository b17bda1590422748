package liveness

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var serverNow = time.Unix(1_800_000_000, 0)

func beat(age time.Duration) HeartbeatObs {
	return HeartbeatObs{Exists: true, Value: strconv.FormatInt(serverNow.Add(-age).UnixMilli(), 10)}
}

func TestBuildLeavesGhostHeldEntriesOutOfLivePending(t *testing.T) {
	t.Parallel()
	target := Target{GroupRef: GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: heartbeatSpec()}
	obs := Observation{
		ServerTime: serverNow,
		Lag:        7, LagValid: true,
		Consumers: []ConsumerObs{
			{Name: "live-1", Idle: 20 * time.Second, Inactive: -1},
			{Name: "live-2", Idle: 20 * time.Second, Inactive: -1},
			{Name: "ghost-1", Idle: 20 * time.Second, Inactive: -1},
			{Name: "broken", Idle: 20 * time.Second, Inactive: -1},
		},
		PendingByConsumer: map[string]int64{"live-1": 3, "live-2": 6, "ghost-1": 40, "broken": 2, "unlisted": 1},
		Heartbeats: map[string]HeartbeatObs{
			"hb:live-1":  beat(time.Second),
			"hb:live-2":  beat(2 * time.Second),
			"hb:ghost-1": beat(time.Minute),
			"hb:broken":  {Err: errors.New("WRONGTYPE")},
		},
	}
	s := Build(&target, obs, nil, time.Now())
	require.Equal(t, int64(9+2+1), s.LivePending, "live and unknown consumers count; the ghost does not")
	require.Equal(t, int64(40), s.GhostPending)
	require.Equal(t, int64(3), s.UnknownPending)
	require.Equal(t, 1, s.GhostConsumers)
	require.Equal(t, int64(7), s.Lag)
	require.False(t, s.LagEstimated)
	verdicts := map[string]Verdict{}
	for _, c := range s.Consumers {
		verdicts[c.Name] = c.Verdict
	}
	require.Equal(t, map[string]Verdict{"broken": Unknown, "ghost-1": Ghost, "live-1": Alive, "live-2": Alive, "unlisted": Unknown}, verdicts)
}

func TestBuildReportsTheLagEstimateWhenLagIsNull(t *testing.T) {
	t.Parallel()
	s := Build(&Target{Spec: idleSpec()}, Observation{ServerTime: serverNow, LagValid: false, LagEstimate: 12}, nil, time.Now())
	require.True(t, s.LagEstimated)
	require.Equal(t, int64(12), s.Lag)
}

// TestBuildOfAMissingGroupHasTheStreamsLengthAsLagAndNothingPending: as
// KEDA's lagCount counts a group not created yet; nothing is judged.
func TestBuildOfAMissingGroupHasTheStreamsLengthAsLagAndNothingPending(t *testing.T) {
	t.Parallel()
	s := Build(&Target{Spec: idleSpec()}, Observation{GroupMissing: true, Lag: 5, LagValid: true}, nil, time.Now())
	require.True(t, s.GroupMissing)
	require.Equal(t, int64(5), s.Lag)
	require.Zero(t, s.LivePending)
	s = Build(&Target{Spec: idleSpec()}, Observation{StreamMissing: true, Lag: 5, LagValid: true}, nil, time.Now())
	require.Zero(t, s.Lag, "no stream, no lag")
}

func TestOwnerHeartbeatUsesTheLongestOwnerWithAKey(t *testing.T) {
	t.Parallel()
	spec := Spec{Heartbeat: true, HeartbeatKey: "hb:{owner}", HeartbeatMaxAge: 5 * time.Second, GhostIdle: time.Minute}
	var err error
	spec.Owner, err = ParseOwnerMatch("prefix")
	require.NoError(t, err)
	require.Equal(t, []string{"hb:review-e-codex-0", "hb:review-e-codex", "hb:review-e", "hb:review"}, spec.HeartbeatKeys("review-e-codex-0"))
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers:         []ConsumerObs{{Name: "review-e-codex-0", Idle: time.Hour, Inactive: -1}},
		PendingByConsumer: map[string]int64{"review-e-codex-0": 4},
		Heartbeats: map[string]HeartbeatObs{
			"hb:review-e-codex-0": {}, "hb:review": {},
			// The codex owner is dead while review-e is alive: the consumer
			// must be judged by review-e-codex's heartbeat.
			"hb:review-e-codex": beat(time.Hour),
			"hb:review-e":       beat(time.Second),
		},
	}
	s := Build(&Target{Spec: spec}, obs, nil, time.Now())
	require.Len(t, s.Consumers, 1)
	require.Equal(t, "review-e-codex", s.Consumers[0].Owner)
	require.Equal(t, Ghost, s.Consumers[0].Verdict, ReasonsString(s.Consumers[0].Reasons))
}

func TestBuildJudgesConsumersByTheLongestPodNameAndDatesTheirGoing(t *testing.T) {
	t.Parallel()
	spec := kubeSpec(false)
	var err error
	spec.Owner, err = ParseOwnerMatch("prefix")
	require.NoError(t, err)
	now := time.Now()
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers: []ConsumerObs{
			{Name: "worker-a-0", Idle: 10 * time.Second, Inactive: -1},
			{Name: "worker-b-0", Idle: 10 * time.Second, Inactive: -1},
			{Name: "stray", Idle: 10 * time.Second, Inactive: -1},
		},
		PendingByConsumer: map[string]int64{"worker-a-0": 4, "worker-b-0": 3, "stray": 1},
		Pods: &PodsObs{ByName: map[string]PodObs{
			"worker-a": {State: PodGone, GoneAt: now.Add(-5 * time.Second)},
			"worker":   {State: PodRunning}, // a shorter name must not win
			"worker-b": {State: PodRunning},
		}},
	}
	s := Build(&Target{Spec: spec}, obs, nil, now)
	byName := map[string]ConsumerView{}
	for _, c := range s.Consumers {
		byName[c.Name] = c
	}
	a := byName["worker-a-0"]
	require.Equal(t, "worker-a", a.Owner)
	require.Equal(t, Ghost, a.Verdict, ReasonsString(a.Reasons))
	require.True(t, a.GoneAt.Equal(now.Add(-5*time.Second)), "GoneAt dates the pod's going: %v", a.GoneAt)
	require.Equal(t, Alive, byName["worker-b-0"].Verdict)
	require.True(t, byName["worker-b-0"].GoneAt.IsZero())
	require.Empty(t, byName["stray"].Owner, "no pod is stray or a prefix of it")
	require.Equal(t, PodNone, byName["stray"].Pod)
	require.Equal(t, int64(4), s.GhostPending)

	obs.Pods = &PodsObs{Err: "pod informer for jobs/app=worker has not synced"}
	for i := range obs.Consumers {
		obs.Consumers[i].Idle = 2 * time.Minute
	}
	s = Build(&Target{Spec: spec}, obs, nil, now)
	require.Equal(t, int64(0), s.GhostPending, "an unsynced informer makes every idle consumer Unknown, never Ghost")
	require.Equal(t, int64(8), s.UnknownPending)
}

// TestBuildComparesAReadWithAPodsDepartureAsOfRedissAnswer: the worker
// read 5ms before Redis answered; its pod went after that answer, while
// the fetch went on (a pod lookup, a wait for the CPU). Judged against the
// moment of the build, the read would look 5ms old and the departure
// older: a shared name, kept alive until the next refresh.
func TestBuildComparesAReadWithAPodsDepartureAsOfRedissAnswer(t *testing.T) {
	t.Parallel()
	now := time.Now()
	obs := Observation{
		ServerTime: serverNow, LagValid: true, ReadAt: now.Add(-40 * time.Millisecond),
		Consumers:         []ConsumerObs{{Name: "worker-a", Idle: 5 * time.Millisecond, Inactive: -1}},
		PendingByConsumer: map[string]int64{"worker-a": 3},
		Pods:              &PodsObs{ByName: map[string]PodObs{"worker-a": {State: PodGone, GoneAt: now.Add(-20 * time.Millisecond), NameUnique: true}}},
	}
	c := Build(&Target{Spec: kubeSpec(false)}, obs, nil, now).Consumers[0]
	require.Equal(t, Ghost, c.Verdict, ReasonsString(c.Reasons))
	require.False(t, c.SharedName)

	obs.ReadAt = time.Time{} // a fetcher that does not say when Redis answered: judged as of now, as before
	c = Build(&Target{Spec: kubeSpec(false)}, obs, nil, now).Consumers[0]
	require.True(t, c.SharedName, "without ReadAt the read looks newer than the departure")
}

// TestBuildMakesEveryIdleConsumerUnknownWhileThePodSourceCannotAnswer: a
// pod pelwarden cannot see because its cache is stale is not an absent
// pod, so no consumer falls back to its idle time.
func TestBuildMakesEveryIdleConsumerUnknownWhileThePodSourceCannotAnswer(t *testing.T) {
	t.Parallel()
	spec := idleSpec()
	spec.Idle, spec.Kubernetes, spec.PodNamespace, spec.PodSelector = false, true, "jobs", "app=worker"
	obs := Observation{
		ServerTime: serverNow,
		Consumers: []ConsumerObs{
			{Name: "w-new", Idle: 10 * time.Minute, Inactive: -1},
			{Name: "w-reading", Idle: time.Second, Inactive: -1},
		},
		PendingByConsumer: map[string]int64{"w-new": 10, "w-reading": 1},
	}
	for name, tc := range map[string]struct {
		pods    *PodsObs
		want    Verdict
		podsErr string
	}{
		"the cache is current and has no such pod": {pods: &PodsObs{ByName: map[string]PodObs{}}, want: Ghost},
		"the cache may be stale":                   {pods: &PodsObs{Err: "the pod watch for jobs/app=worker is listing pods again"}, want: Unknown, podsErr: "the pod watch for jobs/app=worker is listing pods again"},
		"the source was not read":                  {pods: nil, want: Unknown},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := obs
			o.Pods = tc.pods
			s := Build(&Target{GroupRef: GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: spec}, o, nil, time.Now())
			require.Equal(t, tc.want, s.Consumers[0].Verdict, "w-new, idle past ghostIdle: %s", ReasonsString(s.Consumers[0].Reasons))
			require.Equal(t, Alive, s.Consumers[1].Verdict, "a consumer read a moment ago is Alive whatever the pods say")
			require.Equal(t, tc.podsErr, s.PodsErr)
		})
	}
}

func verdictsOf(s *Snapshot) map[string]Verdict {
	out := map[string]Verdict{}
	for _, c := range s.Consumers {
		out[c.Name] = c.Verdict
	}
	return out
}

// TestBuildGivesAStartingWorkerTheGraceFromWhenItWasFirstSeen: the view
// carries first-seen times from snapshot to snapshot, so a reading worker
// without a heartbeat is Alive for the start grace and Ghost after it, and
// a consumer that left the group is forgotten.
func TestBuildGivesAStartingWorkerTheGraceFromWhenItWasFirstSeen(t *testing.T) {
	t.Parallel()
	target := Target{GroupRef: GroupRef{Stream: "s", Group: "g"}, Spec: heartbeatSpec()}
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers:         []ConsumerObs{{Name: "new", Idle: 100 * time.Millisecond, Inactive: -1}, {Name: "old", Idle: 100 * time.Millisecond, Inactive: -1}},
		PendingByConsumer: map[string]int64{"new": 2},
		Heartbeats:        map[string]HeartbeatObs{"hb:new": {}, "hb:old": beat(time.Second)},
	}
	start := time.Now()
	s := Build(&target, obs, nil, start)
	require.Equal(t, Alive, verdictsOf(s)["new"], "a reading consumer pelwarden has just met is a starting worker")
	require.Contains(t, ReasonsString(s.Consumers[0].Reasons), "a starting worker")
	require.Equal(t, int64(2), s.LivePending)

	s = Build(&target, obs, s, start.Add(4*time.Second))
	require.Equal(t, Alive, verdictsOf(s)["new"], "still within the 5s grace")
	require.True(t, s.Consumers[0].FirstSeen.Equal(start), "first seen is carried, not reset")

	s = Build(&target, obs, s, start.Add(6*time.Second))
	require.Equal(t, Ghost, verdictsOf(s)["new"], "past the grace a reading consumer without a heartbeat is a ghost")
	require.Equal(t, int64(2), s.GhostPending)
	require.Zero(t, s.LivePending)

	gone := obs
	gone.Consumers, gone.PendingByConsumer = obs.Consumers[1:], nil
	s = Build(&target, gone, s, start.Add(7*time.Second))
	back := Build(&target, obs, s, start.Add(8*time.Second))
	require.Equal(t, Alive, verdictsOf(back)["new"], "a consumer that left is forgotten: coming back, it is new again")
	require.True(t, back.Consumers[0].FirstSeen.Equal(start.Add(8*time.Second)))
}

// TestBuildJudgesAGroupWithoutHeartbeatRecordsUnknown: a heartbeatKey that
// matches nothing makes every consumer Unknown, whatever its idle time;
// one record anywhere in the group lifts the guard.
func TestBuildJudgesAGroupWithoutHeartbeatRecordsUnknown(t *testing.T) {
	t.Parallel()
	target := Target{GroupRef: GroupRef{Stream: "s", Group: "g"}, Spec: heartbeatSpec()}
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers: []ConsumerObs{
			{Name: "reading", Idle: 100 * time.Millisecond, Inactive: -1},
			{Name: "busy", Idle: time.Hour, Inactive: -1},
		},
		PendingByConsumer: map[string]int64{"reading": 3, "busy": 4},
		Heartbeats:        map[string]HeartbeatObs{"hb:reading": {}, "hb:busy": {}},
	}
	first := Build(&target, obs, nil, time.Now())
	s := Build(&target, obs, first, time.Now().Add(time.Hour))
	require.True(t, s.NoHeartbeatRecords)
	require.Equal(t, map[string]Verdict{"busy": Unknown, "reading": Unknown}, verdictsOf(s))
	require.Zero(t, s.GhostPending, "nothing is left out of the metric")
	require.Equal(t, int64(7), s.LivePending)
	require.Equal(t, int64(7), s.UnknownPending)
	for _, c := range s.Consumers {
		require.Contains(t, ReasonsString(c.Reasons), "pattern is probably wrong", c.Name)
	}

	obs.Heartbeats["hb:reading"] = beat(time.Second)
	s = Build(&target, obs, s, time.Now().Add(2*time.Hour))
	require.False(t, s.NoHeartbeatRecords)
	require.Equal(t, map[string]Verdict{"busy": Ghost, "reading": Alive}, verdictsOf(s))

	idleOnly := Build(&Target{Spec: idleSpec()}, obs, nil, time.Now())
	require.False(t, idleOnly.NoHeartbeatRecords, "the guard is about heartbeats only")
}

// TestBuildLeavesDegradedEntriesOutAndCountsFutureHeartbeats: a degraded
// owner's entries are left out of the live count, as a ghost's are; a
// heartbeat from the future is Unknown, counted as live, and counted.
func TestBuildLeavesDegradedEntriesOutAndCountsFutureHeartbeats(t *testing.T) {
	t.Parallel()
	target := Target{GroupRef: GroupRef{Stream: "s", Group: "g"}, Spec: heartbeatSpec()}
	degraded := `{"time":` + beat(time.Second).Value + `,"degraded":true,"degradedReasons":["quota"]}`
	obs := Observation{
		ServerTime: serverNow, LagValid: true,
		Consumers: []ConsumerObs{
			{Name: "live", Idle: time.Second, Inactive: -1},
			{Name: "deg", Idle: time.Second, Inactive: -1},
			{Name: "skewed", Idle: time.Hour, Inactive: -1},
		},
		PendingByConsumer: map[string]int64{"live": 1, "deg": 5, "skewed": 2},
		Heartbeats: map[string]HeartbeatObs{
			"hb:live": beat(time.Second), "hb:deg": {Exists: true, Value: degraded}, "hb:skewed": beat(-time.Hour),
		},
	}
	s := Build(&target, obs, nil, time.Now())
	require.Equal(t, map[string]Verdict{"deg": Degraded, "live": Alive, "skewed": Unknown}, verdictsOf(s))
	require.Equal(t, int64(5), s.DegradedPending)
	require.Equal(t, 1, s.DegradedConsumers)
	require.Equal(t, int64(1+2), s.LivePending, "the degraded owner's 5 entries are left out")
	require.Zero(t, s.GhostPending)
	require.Equal(t, 1, s.FutureHeartbeats)
	for _, c := range s.Consumers {
		if c.Name == "skewed" {
			require.Equal(t, HeartbeatFuture, c.Heartbeat)
			require.Equal(t, time.Duration(-1), c.HeartbeatAge, "a heartbeat from the future has no age")
		}
	}
}

// Released entries (XNACK) are in XPENDING's count but in no consumer's:
// work no one holds, never a ghost's, whatever the consumers' verdicts.
func TestBuildCountsReleasedEntriesApartFromEveryConsumer(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		total    int64
		by       map[string]int64
		released int64
	}{
		"none released":           {total: 9, by: map[string]int64{"live-1": 3, "ghost-1": 6}, released: 0},
		"some released":           {total: 14, by: map[string]int64{"live-1": 3, "ghost-1": 6}, released: 5},
		"all released":            {total: 8, by: map[string]int64{}, released: 8},
		"a fetcher without total": {total: 0, by: map[string]int64{"live-1": 3}, released: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			target := Target{Spec: heartbeatSpec()}
			obs := Observation{ServerTime: serverNow, LagValid: true, PendingTotal: tc.total, PendingByConsumer: tc.by,
				Consumers:  []ConsumerObs{{Name: "live-1", Idle: time.Second, Inactive: -1}, {Name: "ghost-1", Idle: time.Hour, Inactive: -1}},
				Heartbeats: map[string]HeartbeatObs{"hb:live-1": beat(time.Second), "hb:ghost-1": beat(time.Hour)}}
			s := Build(&target, obs, nil, time.Now())
			require.Equal(t, tc.released, s.ReleasedPending)
			require.Equal(t, tc.by["ghost-1"], s.GhostPending, "released entries are never ghost-held")
			require.Equal(t, tc.by["live-1"], s.LivePending)
		})
	}
}
