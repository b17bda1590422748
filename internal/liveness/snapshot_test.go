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
	s := Build(target, obs, time.Now())
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
	s := Build(Target{Spec: idleSpec()}, Observation{ServerTime: serverNow, LagValid: false, LagEstimate: 12}, time.Now())
	require.True(t, s.LagEstimated)
	require.Equal(t, int64(12), s.Lag)
}

func TestBuildOfAMissingGroupIsEmpty(t *testing.T) {
	t.Parallel()
	s := Build(Target{Spec: idleSpec()}, Observation{GroupMissing: true, Lag: 5, LagValid: true}, time.Now())
	require.True(t, s.GroupMissing)
	require.Zero(t, s.Lag)
	require.Zero(t, s.LivePending)
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
	s := Build(Target{Spec: spec}, obs, time.Now())
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
	s := Build(Target{Spec: spec}, obs, now)
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
	s = Build(Target{Spec: spec}, obs, now)
	require.Equal(t, int64(0), s.GhostPending, "an unsynced informer makes every idle consumer Unknown, never Ghost")
	require.Equal(t, int64(8), s.UnknownPending)
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
			s := Build(Target{GroupRef: GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: spec}, o, time.Now())
			require.Equal(t, tc.want, s.Consumers[0].Verdict, "w-new, idle past ghostIdle: %s", ReasonsString(s.Consumers[0].Reasons))
			require.Equal(t, Alive, s.Consumers[1].Verdict, "a consumer read a moment ago is Alive whatever the pods say")
			require.Equal(t, tc.podsErr, s.PodsErr)
		})
	}
}
