//go:build kube

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/hpaloop"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// hpaGhostWindow is how long the ghost step lasts from the ScaledObjects'
// creation: past the three steps the HPA's default scale-up limits take
// from 1 to 17, so both sides' replica-seconds cover the same time.
const hpaGhostWindow = 45 * time.Second

// hpaStep is one scenario of the HPA suite, in the order they run.
type hpaStep struct {
	name string
	// what says what the step does, as the results show it.
	what string
	run  func(*testing.T, *hpaSuite)
}

var hpaSteps = []hpaStep{
	{"ghosts", "ScaledObjects applied; 3 live consumers hold 9 entries, 2 ghosts hold 40", hpaGhostsStep},
	{"recovery: requeue", "pelwarden's trigger asks for reclaim: requeue; the ghosts' 40 entries go back to the stream", hpaRequeueStep},
	{"recovery: live workers read", "the live consumers read the 40 requeued entries: 49 pending, all live", hpaRereadStep},
	{"scale-down", "every entry acknowledged (scale-down stabilization window 0); then nothing to do", hpaScaleDownStep},
	{"burst", "300 XADDs read at once by the live consumers, acknowledged 5 s after both sides reach the maximum", hpaBurstStep},
	{"held", "9 new entries read by the live consumers", hpaHeldStep},
	{"Redis down", "Redis stops; the fallback is 6 replicas after 3 failed polls", hpaRedisDownStep},
	{"Redis back", "Redis restarts with its data", hpaRedisBackStep},
	{"policy refuses, then admits", "pelwarden's trigger is edited to name a liveness profile the policy does not allow: refused, " +
		"KEDA serves the fallback; then a rollout of pelwarden allows the profile, and nobody touches the ScaledObject", hpaPolicyStep},
}

// TestRealHPAScalesOnPelwardensNumbersBesideKEDAsOwn runs KEDA's whole
// loop: KEDA's operator polls each trigger, KEDA's metrics adapter serves
// the metric through the API server's aggregation layer, and
// kube-controller-manager's HPA controller sets each Deployment's
// spec.replicas from it. One Deployment scales on pelwarden's trigger,
// one on KEDA's built-in redis-streams trigger on the same group, through
// ghosts, their recovery, a burst, an outage of Redis and scale-down. The
// replicas of both over each step are logged and, with EnvHPAResults set,
// written for docs/performance.md.
func TestRealHPAScalesOnPelwardensNumbersBesideKEDAsOwn(t *testing.T) {
	if !inOwnNetwork(t) {
		return
	}
	s := startHPASuite(t)
	s.seedGhosts(t)
	s.warm(t)
	for _, step := range hpaSteps {
		from := time.Now()
		ok := t.Run(step.name, func(t *testing.T) { step.run(t, s) })
		t.Log(scenarioText(s.record(step.name, step.what, from, time.Now())))
		if !ok {
			t.FailNow()
		}
	}
	s.run.WallSeconds = time.Since(s.started).Seconds()
	ghosts := s.run.Scenarios[0]
	t.Logf("ghosts: replica-seconds asked over %.1f s: pelwarden %.0f, KEDA's redis-streams %.0f; the suite took %s",
		ghosts.Seconds, ghosts.Sides[0].ReplicaSeconds, ghosts.Sides[1].ReplicaSeconds, time.Since(s.started).Round(time.Second))
	if path := os.Getenv(EnvHPAResults); path != "" {
		require.NoError(t, hpaloop.Write(path, s.run))
		t.Logf("results written to %s", path)
	}
}

// hpaGhostsStep: the HPA asks 3 replicas of pelwarden's metric (9 live
// entries) and keeps them; the built-in metric counts the ghosts' 40 too
// and climbs to 17 at the HPA's default scale-up limits.
func hpaGhostsStep(t *testing.T, s *hpaSuite) {
	applied := time.Now()
	s.applyScaledObjects(t)
	s.waitReplicas(t, 17, hpaKEDA)
	s.waitReplicas(t, 3, hpaPW)
	time.Sleep(time.Until(applied.Add(hpaGhostWindow)))
	s.requireBetween(t, hpaPW, hpaMin, 3, applied)
	require.Equal(t, int32(17), s.timeline.now()[hpaKEDA])
	require.Equal(t, map[string]int64{"w1": 3, "w2": 3, "w3": 3, "g1": 20, "g2": 20}, pendingOf(t, s.rdb, kedaStream, kedaGroup),
		"the ghosts still hold their entries")
}

// hpaRequeueStep: pelwarden gives the ghosts' entries back as new
// entries, which neither trigger counts as pending: the built-in side
// falls to 3, pelwarden's never moved. The step lasts until the HPA's
// scale-up limit no longer remembers the built-in side's 17 (it limits a
// scale-up by the replicas of the last 15 s), so the next step starts
// both sides alike.
func hpaRequeueStep(t *testing.T, s *hpaSuite) {
	from := time.Now()
	s.updateTrigger(t, kedaNS, hpaPW, func(md map[string]any) {
		md["reclaim"] = "requeue"
		md["entryStaleSeconds"] = "1"
	})
	live := map[string]int64{"w1": 3, "w2": 3, "w3": 3}
	eventually(t, kedaWait, func() error {
		if p := pendingOf(t, s.rdb, kedaStream, kedaGroup); !maps.Equal(p, live) {
			return fmt.Errorf("pending: %v", p)
		}
		return nil
	})
	t.Logf("the ghosts' entries requeued %s after the trigger asked", time.Since(from).Round(100*time.Millisecond))
	s.waitReplicas(t, 3, hpaKEDA)
	dropped, _ := s.timeline.reached(hpaKEDA, 3, from)
	time.Sleep(time.Until(dropped.Add(16 * time.Second)))
	s.requireStayed(t, hpaPW, 3, from)
	groups, err := s.rdb.XInfoGroups(context.Background(), kedaStream).Result()
	require.NoError(t, err)
	require.Equal(t, int64(40), groups[0].Lag, "the requeued copies wait as lag")
}

// hpaRereadStep: the live workers take the requeued copies; both
// metrics are 49 and both sides climb to 17.
func hpaRereadStep(t *testing.T, s *hpaSuite) {
	for i, w := range hpaLive {
		redistest.Read(t, s.rdb, kedaStream, kedaGroup, w, []int{14, 13, 13}[i])
	}
	s.waitReplicas(t, 17, hpaPW, hpaKEDA)
}

// hpaScaleDownStep: with a stabilization window of 0 and the default
// scale-down policy (100 % per 15 s), both sides go from 17 to the
// minimum in one step once the work is done. They rest there until the
// HPA's scale-up limit, which counts from the most replicas of the last
// 15 s, has forgotten the 17, so the burst starts as on a quiet group.
func hpaScaleDownStep(t *testing.T, s *hpaSuite) {
	from := time.Now()
	s.ackAll(t)
	s.waitReplicas(t, hpaMin, hpaPW, hpaKEDA)
	time.Sleep(16 * time.Second)
	for _, side := range hpaSides {
		var got []int32
		for _, r := range s.timeline.since(side.name, from) {
			got = append(got, r.replicas)
		}
		require.Equal(t, []int32{17, hpaMin}, got, "%s goes down in one step", side.name)
	}
}

// hpaBurstStep: 300 entries read at once ask for 100 replicas; both sides
// climb to maxReplicaCount at the default limits, and come back down to
// the minimum once the entries are acknowledged.
func hpaBurstStep(t *testing.T, s *hpaSuite) {
	from := time.Now()
	redistest.AddJobs(t, s.rdb, kedaStream, "burst-", 300)
	for _, w := range hpaLive {
		redistest.Read(t, s.rdb, kedaStream, kedaGroup, w, 100)
	}
	s.waitReplicas(t, hpaMax, hpaPW, hpaKEDA)
	time.Sleep(5 * time.Second)
	s.ackAll(t)
	s.waitReplicas(t, hpaMin, hpaPW, hpaKEDA)
	for _, side := range hpaSides {
		s.requireBetween(t, side.name, hpaMin, hpaMax, from)
	}
}

// hpaHeldStep: the live workers hold 9 entries; both sides go to 3.
func hpaHeldStep(t *testing.T, s *hpaSuite) {
	redistest.AddJobs(t, s.rdb, kedaStream, "held-", 9)
	for _, w := range hpaLive {
		redistest.Read(t, s.rdb, kedaStream, kedaGroup, w, 3)
	}
	s.waitReplicas(t, 3, hpaPW, hpaKEDA)
}

// hpaRedisDownStep: with both sides at 3, Redis stops. pelwarden answers
// KEDA's polls with an error, so after failureThreshold failed polls KEDA
// serves the fallback. KEDA's built-in scaler dials Redis when KEDA
// builds it: after its first failure KEDA cannot build it again, the
// HPA gets no metric at all (the fallback applies only to a scaler that
// exists) and holds the replicas. Neither side drops to the minimum.
func hpaRedisDownStep(t *testing.T, s *hpaSuite) {
	down := time.Now()
	s.redis.Stop()
	s.waitReplicas(t, hpaFallback, hpaPW)
	s.waitCondition(t, hpaPW, "Fallback", "True")
	time.Sleep(10 * time.Second)
	for _, side := range hpaSides {
		s.requireBetween(t, side.name, 3, hpaFallback, down)
	}
	require.Equal(t, int32(hpaFallback), s.timeline.now()[hpaPW], "pelwarden's side holds the fallback")
	t.Logf("%s with Redis down: %s", hpaKEDA, s.conditions(t, hpaKEDA))
}

// hpaRedisBackStep: Redis restarts with the group; both metrics are read
// again and both sides return to 3.
func hpaRedisBackStep(t *testing.T, s *hpaSuite) {
	s.redis.Restart(t)
	s.waitReplicas(t, 3, hpaPW, hpaKEDA)
	s.waitCondition(t, hpaPW, "Fallback", "False")
	require.Equal(t, map[string]int64{"w1": 3, "w2": 3, "w3": 3}, pendingOf(t, s.rdb, kedaStream, kedaGroup))
}

// hpaPolicyStep: pelwarden's trigger is edited to name a liveness
// profile no rule lets its namespace name. pelwarden refuses it, but
// answers GetMetricSpec with the trigger's own spec: KEDA rebuilds the
// HPA on the metric it had, whose polls are refused, and after
// failureThreshold of them serves the fallback. The operator then allows
// the profile and rolls pelwarden out; nobody touches the ScaledObject.
// The HPA's metric is served again at KEDA's next poll, and the side
// returns to the 3 replicas the live work asks. (Answered a placeholder
// metric instead, this HPA stayed on it: a ScaledObject with a fallback
// stays Ready through the refusal, and KEDA rebuilds an HPA on a Ready
// ScaledObject only when someone changes it.) The built-in side never
// moves.
func hpaPolicyStep(t *testing.T, s *hpaSuite) {
	from := time.Now()
	s.updateTrigger(t, kedaNS, hpaPW, func(md map[string]any) { md["livenessProfile"] = "batch" })
	s.waitReplicas(t, hpaFallback, hpaPW)
	require.Equal(t, "s0-pelwarden-default-jobs-workers", s.hpaMetric(t, hpaPW).Metric.Name, "the HPA asks for the trigger's own metric")
	values := hpaValues(t, s.redis.Addr())
	rules := values["triggers"].(map[string]any)["rules"].([]any)
	rules[0].(map[string]any)["profiles"] = []any{"workers", "batch"}
	s.rollOut(t, values)
	ready := time.Now()
	s.waitReplicas(t, 3, hpaPW)
	t.Logf("%s back at 3 replicas %.1f s after the rollout's pelwarden was ready, untouched", hpaPW, time.Since(ready).Seconds())
	s.requireStayed(t, hpaKEDA, 3, from)
}
