//go:build kube

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kedaBadMetadata: a trigger whose metadata pelwarden refuses. KEDA v2.21
// asks GetMetricSpec first and drops an error from it (its external
// scaler logs it and returns no specs; the ScaledObject would say only
// "no metric specs returned from scalers"), so pelwarden answers it with
// the placeholder spec. KEDA then builds the HPA and runs its scale loop,
// whose GetMetrics is refused: KEDA shows pelwarden's InvalidArgument text
// as a KEDAScalerFailed event, sets Ready=False, and never scales on the
// error, neither up from 0 nor down from 1. Fixed, the trigger is served
// under its own metric.
func kedaBadMetadata(t *testing.T, s *kedaSuite) {
	createDeployment(t, s.kedaEnv, kedaNS, sideBad)
	so := s.pelwardenScaledObject(t, sideBad, "external")
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	triggers[0].(map[string]any)["metadata"].(map[string]any)["lagCount"] = "5"
	require.NoError(t, unstructured.SetNestedSlice(so.Object, triggers, "spec", "triggers"))
	// Jobs wait, so a refusal read as activity would scale up.
	s.addJobs(t, 6)
	created := time.Now()
	s.create(t, scaledObjects, so)
	want := `code = InvalidArgument desc = metadata "backlogCount": set only one of backlogCount and lagCount`
	eventually(t, kedaWait, func() error {
		if !slices.ContainsFunc(s.events(t, kedaNS, sideBad), func(e string) bool {
			return strings.Contains(e, "KEDAScalerFailed") && strings.Contains(e, want)
		}) {
			return fmt.Errorf("no KEDAScalerFailed event carries %s", want)
		}
		return nil
	})
	c := s.waitCondition(t, sideBad, "Ready", "False")
	t.Logf("%s: %s; events %q", sideBad, s.conditions(t, sideBad), s.events(t, kedaNS, sideBad))
	require.Equal(t, "TriggerError", c["reason"], "the scale loop's failure, not a missing spec")
	hpa := s.hpaMetric(t, sideBad)
	require.Equal(t, "s0-pelwarden-refused", hpa.Metric.Name, "the HPA holds the placeholder")
	t.Logf("%s: HPA metric %s target AverageValue %s", sideBad, hpa.Metric.Name, hpa.Target.AverageValue)
	require.False(t, slices.ContainsFunc(s.operatorLog(t), func(l string) bool {
		return strings.Contains(l, "no metric specs returned from scalers") && strings.Contains(l, sideBad)
	}), "KEDA got a spec")

	// Several polling intervals and cooldowns at 0 with jobs waiting, then
	// as many at 1: KEDA neither starts nor stops a worker on the refusal.
	time.Sleep(3 * kedaCooldown * time.Second)
	s.requireStayed(t, sideBad, 0, created)
	_, err := s.api.admin.AppsV1().Deployments(kedaNS).UpdateScale(context.Background(), sideBad,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: sideBad, Namespace: kedaNS}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, metav1.UpdateOptions{})
	require.NoError(t, err)
	s.waitReplicas(t, 1, sideBad)
	up := time.Now()
	t.Logf("%s scaled to 1 by hand at %.1fs", sideBad, up.Sub(created).Seconds())
	time.Sleep(3 * kedaCooldown * time.Second)
	s.requireStayed(t, sideBad, 1, up)
	t.Logf("%s at 1 replica: %s", sideBad, s.conditions(t, sideBad))

	s.updateTrigger(t, kedaNS, sideBad, func(md map[string]any) { delete(md, "lagCount") })
	eventually(t, kedaWait, func() error {
		if name := s.hpaMetric(t, sideBad).Metric.Name; name != "s0-pelwarden-default-jobs-workers" {
			return fmt.Errorf("the HPA's metric is %s", name)
		}
		return nil
	})
	s.waitCondition(t, sideBad, "Ready", "True")
	t.Logf("%s fixed: %s; events %q", sideBad, s.conditions(t, sideBad), s.events(t, kedaNS, sideBad))
}

// hpaMetric is the External metric of the HPA KEDA made for side.
func (s *kedaSuite) hpaMetric(t *testing.T, side string) *autoscalingv2.ExternalMetricSource {
	t.Helper()
	hpa, err := s.api.admin.AutoscalingV2().HorizontalPodAutoscalers(kedaNS).Get(context.Background(), "keda-hpa-"+side, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, hpa.Spec.Metrics, 1)
	require.NotNil(t, hpa.Spec.Metrics[0].External, "an External metric")
	return hpa.Spec.Metrics[0].External
}

// operatorLog is KEDA's operator's output so far, by line.
func (s *kedaSuite) operatorLog(t *testing.T) []string {
	t.Helper()
	return strings.Split(s.operator.Tail(1<<20), "\n")
}

// kedaPolicyAdmits: two ScaledObjects, one polled (external) and one
// pushed (external-push), name a liveness profile the trigger policy does
// not let their namespace name. pelwarden refuses them (PermissionDenied)
// but answers GetMetricSpec with the trigger's own spec, so KEDA builds
// their HPAs on the metric they will have. The operator then allows the
// profile and rolls pelwarden out (the chart's config checksum restarts
// the pod); nobody touches the ScaledObjects. KEDA's next poll is served,
// under the metric the HPA already asks for, and each ScaledObject turns
// Ready within a polling interval or two of the rollout (logged).
func kedaPolicyAdmits(t *testing.T, s *kedaSuite) {
	const metric = "s0-pelwarden-default-jobs-workers"
	sides := map[string]string{"worker-batch": "external", "worker-batch-push": "external-push"}
	for side, typ := range sides {
		createDeployment(t, s.kedaEnv, kedaNS, side)
		so := s.pelwardenScaledObject(t, side, typ)
		triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
		triggers[0].(map[string]any)["metadata"].(map[string]any)["livenessProfile"] = "batch"
		require.NoError(t, unstructured.SetNestedSlice(so.Object, triggers, "spec", "triggers"))
		s.create(t, scaledObjects, so)
	}
	want := `code = PermissionDenied desc = metadata "livenessProfile": namespace "jobs" may not name profile "batch"`
	for side := range sides {
		eventually(t, kedaWait, func() error {
			if !slices.ContainsFunc(s.events(t, kedaNS, side), func(e string) bool { return strings.Contains(e, want) }) {
				return fmt.Errorf("no event of %s carries %s", side, want)
			}
			return nil
		})
		require.Equal(t, metric, s.hpaMetric(t, side).Metric.Name, "%s's HPA asks for the trigger's own metric while the policy refuses it", side)
		s.waitCondition(t, side, "Ready", "False")
	}

	values := pelwardenValues(t, s.redis.Addr())
	rules, _, _ := unstructured.NestedSlice(values, "triggers", "rules")
	rules[0].(map[string]any)["profiles"] = []any{"workers", "batch"}
	require.NoError(t, unstructured.SetNestedSlice(values, rules, "triggers", "rules"))
	s.rollOut(t, values)
	ready := time.Now()
	for side, typ := range sides {
		s.waitCondition(t, side, "Ready", "True")
		t.Logf("%s (%s) admitted by the rollout: Ready %.1fs after the new pelwarden was ready (pollingInterval %ds), untouched; its HPA asks for %s",
			side, typ, time.Since(ready).Seconds(), kedaPolling, s.hpaMetric(t, side).Metric.Name)
		require.Equal(t, metric, s.hpaMetric(t, side).Metric.Name)
	}
}
