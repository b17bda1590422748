package metadata

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/policy"
)

var testEnv = Env{Conns: []string{"default", "orders"}, Namespace: "jobs", Kubernetes: true}

func base(kv ...string) map[string]string {
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "scalerAddress": "pelwarden:9090"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return md
}

func TestParseMetadataDefaultsMatchKEDAsRedisStreamsScaler(t *testing.T) {
	t.Parallel()
	r, err := Parse(base(), testEnv)
	require.NoError(t, err)
	require.Equal(t, "default", r.Target.Conn)
	require.Equal(t, policy.Pending, r.Metric)
	require.InDelta(t, 5.0, r.TargetValue, 0)
	require.Zero(t, r.Activation)
	require.True(t, r.Target.Spec.Idle)
	require.False(t, r.Target.Spec.Heartbeat)
	require.Equal(t, 300*time.Second, r.Target.Spec.GhostIdle)
	require.Equal(t, "pelwarden-default-jobs-workers", r.MetricName)
}

func TestParseMetadataReadsEveryKey(t *testing.T) {
	t.Parallel()
	r, err := Parse(base(
		"redis", "orders", "backlogCount", "12.5", "activationBacklogCount", "3",
		"liveness", "idle, heartbeat", "ghostIdleSeconds", "90", "heartbeatKey", "hb:{owner}",
		"heartbeatMaxAgeSeconds", "7.5", "ownerMatch", "prefix", "someFutureKey", "x",
	), testEnv)
	require.NoError(t, err)
	require.Equal(t, "orders", r.Target.Conn)
	require.Equal(t, policy.Backlog, r.Metric)
	require.InDelta(t, 12.5, r.TargetValue, 0)
	require.InDelta(t, 3.0, r.Activation, 0)
	require.True(t, r.Target.Spec.Idle && r.Target.Spec.Heartbeat)
	require.Equal(t, 90*time.Second, r.Target.Spec.GhostIdle)
	require.Equal(t, 7500*time.Millisecond, r.Target.Spec.HeartbeatMaxAge)
	require.Equal(t, 7500*time.Millisecond, r.Target.Spec.StartGrace, "the start grace defaults to the heartbeat max age")
	require.Equal(t, "prefix", r.Target.Spec.Owner.String())

	r, err = Parse(base("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatStartGraceSeconds", "0"), testEnv)
	require.NoError(t, err)
	require.Zero(t, r.Target.Spec.StartGrace, "a start grace of 0 is allowed: workers beat before they read")
}

func TestParseReadsHygieneKeys(t *testing.T) {
	t.Parallel()
	r, err := Parse(base(), testEnv)
	require.NoError(t, err)
	require.Equal(t, policy.ReclaimOff, r.Hygiene.Mode, "a ScaledObject leaves its group alone unless asked")
	require.Equal(t, 30*time.Second, r.Hygiene.EntryStale)
	require.Equal(t, "pelwarden-deliveries", r.Hygiene.DeliveryCountField)
	require.True(t, r.Hygiene.DeleteGhostConsumers)

	r, err = Parse(base("reclaim", "claim", "entryStaleSeconds", "5", "hardTimeoutSeconds", "600", "maxDeliveries", "4",
		"deliveryCountField", "off", "deleteGhostConsumers", "false", "deleteOriginal", "true", "claimFallback", "skip", "dryRun", "true"), testEnv)
	require.NoError(t, err)
	h := r.Hygiene
	require.Equal(t, policy.ReclaimClaim, h.Mode)
	require.Equal(t, 5*time.Second, h.EntryStale)
	require.Equal(t, 10*time.Minute, h.HardTimeout)
	require.Equal(t, int64(4), h.MaxDeliveries)
	require.Equal(t, "jobs:dead", h.DeadLetterStream, "the dead-letter stream defaults beside the stream")
	require.Empty(t, h.DeliveryCountField)
	require.False(t, h.DeleteGhostConsumers)
	require.True(t, h.DeleteOriginal && h.DryRun)
	require.Equal(t, policy.FallbackSkip, h.ClaimFallback)
}

func TestParseMetadataNamesTheBadKey(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		md      map[string]string
		key     string
		mention string
	}{
		"missing stream":                   {md: map[string]string{"consumerGroup": "g"}, key: "stream", mention: "required"},
		"missing group":                    {md: map[string]string{"stream": "s"}, key: "consumerGroup", mention: "required"},
		"unknown connection":               {md: base("redis", "nope"), key: "redis", mention: "default, orders"},
		"non-numeric target":               {md: base("pendingEntriesCount", "five"), key: "pendingEntriesCount", mention: "> 0"},
		"zero target":                      {md: base("lagCount", "0"), key: "lagCount", mention: "> 0"},
		"negative activation":              {md: base("activationPendingEntriesCount", "-1"), key: "activationPendingEntriesCount", mention: ">= 0"},
		"two of pelwarden's metrics":       {md: base("pendingEntriesCount", "5", "backlogCount", "5"), key: "backlogCount", mention: "only one"},
		"activation of another metric":     {md: base("lagCount", "5", "activationPendingEntriesCount", "1"), key: "activationPendingEntriesCount", mention: "activationLagCount"},
		"unknown liveness source":          {md: base("liveness", "idle,psychic"), key: "liveness", mention: "idle, heartbeat, kubernetes"},
		"kubernetes without a selector":    {md: base("liveness", "kubernetes"), key: "podSelector", mention: "label selector"},
		"kubernetes bad selector":          {md: base("liveness", "kubernetes", "podSelector", "app in (("), key: "podSelector", mention: "app=worker"},
		"kubernetes bad namespace":         {md: base("liveness", "kubernetes", "podSelector", "app=w", "podNamespace", "Jobs_1"), key: "podNamespace", mention: "namespace name"},
		"kubernetes negative grace":        {md: base("liveness", "kubernetes", "podSelector", "app=w", "podDeletionGraceSeconds", "-1"), key: "podDeletionGraceSeconds", mention: "0 or a number of seconds"},
		"pod selector without source":      {md: base("podSelector", "app=w"), key: "podSelector", mention: "only when"},
		"heartbeat without a key":          {md: base("liveness", "heartbeat"), key: "heartbeatKey", mention: "{consumer}"},
		"heartbeat key with both":          {md: base("liveness", "heartbeat", "heartbeatKey", "{owner}:{consumer}"), key: "heartbeatKey", mention: "exactly one"},
		"heartbeat key without source":     {md: base("heartbeatKey", "hb:{consumer}"), key: "heartbeatKey", mention: "only when"},
		"start grace without heartbeat":    {md: base("heartbeatStartGraceSeconds", "5"), key: "heartbeatStartGraceSeconds", mention: "only when"},
		"negative start grace":             {md: base("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatStartGraceSeconds", "-1"), key: "heartbeatStartGraceSeconds", mention: "0 (a worker"},
		"ghost idle not a number":          {md: base("ghostIdleSeconds", "5m"), key: "ghostIdleSeconds", mention: "seconds"},
		"ghost idle zero":                  {md: base("ghostIdleSeconds", "0"), key: "ghostIdleSeconds", mention: "from 0.001"},
		"heartbeat max age over a year":    {md: base("heartbeatMaxAgeSeconds", "1e12"), key: "heartbeatMaxAgeSeconds", mention: "to 31622400"},
		"bad owner match":                  {md: base("ownerMatch", "fuzzy"), key: "ownerMatch", mention: "exact, prefix or regex"},
		"regex without owner group":        {md: base("ownerMatch", "regex:^(.*)$"), key: "ownerMatch", mention: "(?P<owner>"},
		"stream name too long":             {md: base("stream", strings.Repeat("s", 2000)), key: "stream", mention: "at most"},
		"unknown reclaim mode":             {md: base("reclaim", "steal"), key: "reclaim", mention: "requeue, claim, release or off"},
		"fractional max deliveries":        {md: base("maxDeliveries", "2.5"), key: "maxDeliveries", mention: "whole number"},
		"dead letters into the stream":     {md: base("deadLetterStream", "jobs"), key: "deadLetterStream", mention: "differ"},
		"negative hard timeout":            {md: base("hardTimeoutSeconds", "-3"), key: "hardTimeoutSeconds", mention: "seconds"},
		"bad boolean":                      {md: base("dryRun", "maybe"), key: "dryRun", mention: "true or false"},
		"bad claim fallback":               {md: base("claimFallback", "drop"), key: "claimFallback", mention: "requeue or skip"},
		"release without claiming readers": {md: base("reclaim", "release"), key: "reclaim", mention: "claimingReaders: true"},
		"bad claiming readers":             {md: base("claimingReaders", "yes"), key: "claimingReaders", mention: "true or false"},
		"empty delivery count field":       {md: base("deliveryCountField", ""), key: "deliveryCountField", mention: "or off"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := maps.Clone(tc.md)
			_, err := Parse(tc.md, testEnv)
			require.Error(t, err)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.key, me.Key, "error: %v", err)
			require.Contains(t, err.Error(), tc.mention)
			require.Equal(t, in, tc.md, "parsing does not change its input")
		})
	}
}

func TestParseKubernetesSourceDefaultsToTheScaledObjectNamespace(t *testing.T) {
	t.Parallel()
	r, err := Parse(base("liveness", "kubernetes,heartbeat", "heartbeatKey", "hb:{owner}", "podSelector", "app=worker,tier!=batch"), testEnv)
	require.NoError(t, err)
	s := r.Target.Spec
	require.True(t, s.Kubernetes && s.Heartbeat && !s.Idle)
	require.Equal(t, "jobs", s.PodNamespace, "podNamespace defaults to the ScaledObject's")
	require.Equal(t, "app=worker,tier!=batch", s.PodSelector)
	require.Equal(t, DefaultPodDeletionGraceSeconds*time.Second, s.PodGrace)

	r, err = Parse(base("liveness", "kubernetes", "podSelector", "app=w", "podNamespace", "other", "podDeletionGraceSeconds", "0"), testEnv)
	require.NoError(t, err)
	require.Equal(t, "other", r.Target.Spec.PodNamespace)
	require.Zero(t, r.Target.Spec.PodGrace, "a grace of 0 is allowed")
}

func TestParseRefusesKubernetesWhenPelwardenDoesNotWatchTheAPI(t *testing.T) {
	t.Parallel()
	env := testEnv
	env.Kubernetes = false
	_, err := Parse(base("liveness", "kubernetes", "podSelector", "app=w"), env)
	var me *Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, "liveness", me.Key)
	require.Contains(t, err.Error(), "kubernetes.enabled")

	env = testEnv
	env.Namespace = ""
	_, err = Parse(base("liveness", "kubernetes", "podSelector", "app=w"), env)
	require.ErrorAs(t, err, &me)
	require.Equal(t, "podNamespace", me.Key, "with no ScaledObject namespace, podNamespace is required")
}

// FuzzParse checks that no metadata makes the parser panic, that a
// failure always names a key, and that an accepted request is usable.
func FuzzParse(f *testing.F) {
	f.Add("jobs", "workers", "pendingEntriesCount", "5", "idle", "", "", "300")
	f.Add("jobs", "workers", "lagCount", "1e3", "heartbeat", "hb:{consumer}", "exact", "30")
	f.Add("s", "g", "backlogCount", "0.5", "idle,heartbeat", "hb:{owner}", "prefix", "1")
	f.Add("s", "g", "activationLagCount", "-1", "kubernetes", "{owner}{consumer}", "regex:(?P<owner>", "NaN")
	f.Add("s", "g", "pendingEntriesCount", "3", "kubernetes", "app=worker", "jobs", "0.5")
	f.Add("s", "g", "pendingEntriesCount", "3", "kubernetes,heartbeat", "app in (a,b)", "-", "2")
	f.Add("", "", "pendingEntriesCount", "+Inf", ",", "", "regex:^(?P<owner>.+)-\\d+$", "1e400")
	f.Add("s", "g", "pendingEntriesCount", "1e-300", "heartbeat", "{owner}{owner}{owner}", "prefix", "1e-12")
	f.Add("s", "g", "lagCount", "1", "kubernetes", "app=w", "jobs", "5e-324")
	f.Add("my-stream", "", "streamLength", "50", "idle", "", "", "300")
	f.Add("my-stream", "g", "streamLength", "-1", "idle", "", "", "300")
	f.Fuzz(func(t *testing.T, stream, group, metricKey, metricValue, sources, hbKey, ownerMatch, ghostIdle string) {
		md := map[string]string{
			"stream": stream, "consumerGroup": group, metricKey: metricValue,
			"liveness": sources, "heartbeatKey": hbKey, "ownerMatch": ownerMatch, "ghostIdleSeconds": ghostIdle,
		}
		if strings.Contains(sources, "kubernetes") {
			// The selector and namespace parsers get the fuzzed text too.
			md["podSelector"], md["podNamespace"], md["podDeletionGraceSeconds"] = hbKey, ownerMatch, ghostIdle
		}
		r, err := Parse(md, testEnv)
		if err != nil {
			var me *Error
			if !errors.As(err, &me) || me.Key == "" {
				t.Fatalf("error %v does not name a key", err)
			}
			return
		}
		if r.TargetValue < MinTarget || r.Activation < 0 || r.Target.Stream == "" || r.Target.Group == "" {
			t.Fatalf("accepted an unusable request: %+v", r)
		}
		if r.Target.Spec.Kubernetes && (r.Target.Spec.PodSelector == "" || r.Target.Spec.PodNamespace == "" || r.Target.Spec.PodGrace < 0) {
			t.Fatalf("accepted an unusable kubernetes source: %+v", r.Target.Spec)
		}
		sp := r.Target.Spec
		if sp.GhostIdle < MinDuration || sp.HeartbeatMaxAge < MinDuration || r.Hygiene.EntryStale < MinDuration ||
			(sp.StartGrace != 0 && sp.StartGrace < MinDuration) || (sp.PodGrace != 0 && sp.PodGrace < MinDuration) {
			t.Fatalf("accepted a duration under %s: %+v", MinDuration, sp)
		}
		if sp.Heartbeat && strings.Count(sp.HeartbeatKey, "{consumer}")+strings.Count(sp.HeartbeatKey, "{owner}") != 1 {
			t.Fatalf("accepted heartbeatKey %q without exactly one placeholder", sp.HeartbeatKey)
		}
		for _, c := range []string{"a", "b-0", ""} {
			_ = r.Target.Spec.HeartbeatKeys(c)
		}
	})
}

func TestDefaultHygieneIsATriggerWithOnlyReclaimRequeue(t *testing.T) {
	t.Parallel()
	r, err := Parse(map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue"}, Env{Conns: []string{"default"}})
	require.NoError(t, err)
	require.Equal(t, r.Hygiene, DefaultHygiene("jobs"))
	require.Equal(t, policy.ReclaimRequeue, DefaultHygiene("jobs").Mode)
}
