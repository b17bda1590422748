package metadata

import (
	"errors"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/policy"
)

func TestParseTriggerRefusesConfigOnlyKeysWithoutFailingTheMetric(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		md  map[string]string
		key string
	}{
		"claim":                    {md: base("reclaim", "claim"), key: "reclaim"},
		"hard timeout":             {md: base("reclaim", "requeue", "hardTimeoutSeconds", "0.001"), key: "hardTimeoutSeconds"},
		"delete originals":         {md: base("reclaim", "requeue", "deleteOriginal", "true"), key: "deleteOriginal"},
		"carry field":              {md: base("reclaim", "requeue", "deliveryCountField", "payload"), key: "deliveryCountField"},
		"dead letters elsewhere":   {md: base("reclaim", "requeue", "maxDeliveries", "1", "deadLetterStream", "payments"), key: "deadLetterStream"},
		"claim fallback":           {md: base("reclaim", "requeue", "claimFallback", "skip"), key: "claimFallback"},
		"release":                  {md: base("reclaim", "release", "claimingReaders", "true"), key: "reclaim"},
		"claiming readers":         {md: base("reclaim", "requeue", "claimingReaders", "true"), key: "claimingReaders"},
		"a malformed hygiene key":  {md: base("reclaim", "requeue", "entryStaleSeconds", "soon"), key: "entryStaleSeconds"},
		"an unknown reclaim value": {md: base("reclaim", "steal"), key: "reclaim"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := maps.Clone(tc.md)
			r, err := ParseTrigger(tc.md, testEnv)
			require.NoError(t, err, "the metric keys are fine")
			require.NotNil(t, r.HygieneErr)
			require.Equal(t, tc.key, r.HygieneErr.Key)
			require.Equal(t, policy.ReclaimOff, r.Hygiene.Mode, "a refused request asks the loop for nothing")
			plain, err := ParseTrigger(base(), testEnv)
			require.NoError(t, err)
			require.Equal(t, plain.Target, r.Target)
			require.Equal(t, plain.MetricName, r.MetricName)
			require.Equal(t, in, tc.md)

			_, err = Parse(tc.md, testEnv)
			if tc.key == "entryStaleSeconds" || name == "an unknown reclaim value" {
				require.Error(t, err, "configuration refuses malformed keys")
			} else {
				require.NoError(t, err, "configuration may set it")
			}
		})
	}
}

func TestParseTriggerAcceptsDefaultsOfConfigOnlyKeys(t *testing.T) {
	t.Parallel()
	r, err := ParseTrigger(base("reclaim", "requeue", "deleteOriginal", "false", "hardTimeoutSeconds", "0",
		"deliveryCountField", DefaultDeliveryCountField, "maxDeliveries", "3", "deadLetterStream", "jobs:dead", "claimFallback", "requeue"), testEnv)
	require.NoError(t, err)
	require.Nil(t, r.HygieneErr)
	require.Equal(t, policy.ReclaimRequeue, r.Hygiene.Mode)
	require.Equal(t, "jobs:dead", r.Hygiene.DeadLetterStream)
}

func TestParseTriggerIgnoresHygieneKeysOfATriggerThatDoesNotAskForReclaim(t *testing.T) {
	t.Parallel()
	for _, reclaim := range []string{"", "off"} {
		md := base("deleteOriginal", "true", "entryStaleSeconds", "soon")
		if reclaim != "" {
			md["reclaim"] = reclaim
		}
		r, err := ParseTrigger(md, testEnv)
		require.NoError(t, err)
		require.Nil(t, r.HygieneErr)
		require.Equal(t, policy.ReclaimOff, r.Hygiene.Mode)
	}
}

func TestParseTriggerStillRefusesBadMetricKeys(t *testing.T) {
	t.Parallel()
	_, err := ParseTrigger(base("reclaim", "claim", "pendingEntriesCount", "0"), testEnv)
	var me *Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, "pendingEntriesCount", me.Key)
}

// FuzzParseTrigger checks the split: whatever the hygiene keys hold, a
// trigger's metric parses exactly as without them, a refused hygiene
// request names a key and asks for nothing, and an admitted one never
// carries a config-only setting.
func FuzzParseTrigger(f *testing.F) {
	f.Add("requeue", "30", "0", "false", "pelwarden-deliveries", "", "3")
	f.Add("claim", "0.001", "0.001", "true", "payload", "payments", "1")
	f.Add("requeue", "1e-9", "", "maybe", "off", "jobs:dead", "2.5")
	f.Add("off", "", "600", "true", "", "jobs", "-1")
	f.Fuzz(func(t *testing.T, reclaim, stale, hard, del, carry, dlq, maxDel string) {
		md := base("reclaim", reclaim, "entryStaleSeconds", stale, "hardTimeoutSeconds", hard, "deleteOriginal", del,
			"deliveryCountField", carry, "deadLetterStream", dlq, "maxDeliveries", maxDel)
		r, err := ParseTrigger(md, testEnv)
		if err != nil {
			t.Fatalf("hygiene keys failed the metric: %v", err)
		}
		plain, _ := ParseTrigger(base(), testEnv)
		if r.Target != plain.Target || r.MetricName != plain.MetricName || r.TargetValue != plain.TargetValue {
			t.Fatalf("hygiene keys changed the metric: %+v", r)
		}
		if r.HygieneErr != nil {
			if r.HygieneErr.Key == "" || r.Hygiene.Mode != policy.ReclaimOff {
				t.Fatalf("a refusal must name a key and ask for nothing: %+v", r)
			}
			return
		}
		if r.Hygiene.Mode == policy.ReclaimOff {
			return
		}
		if err := CheckTriggerHygiene(r.Hygiene, "jobs"); err != nil || r.Hygiene.EntryStale <= 0 {
			var me *Error
			t.Fatalf("admitted a config-only or zero setting: %+v (%v, %v)", r.Hygiene, err, errors.As(err, &me))
		}
	})
}
