package trigger

import (
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// loop records what the registry hands the hygiene loop.
type loop struct {
	mu  sync.Mutex
	got map[liveness.GroupRef]policy.Hygiene
	// last is the latest enrollment of each group.
	last map[liveness.GroupRef]Enrollment
	n    int
}

func (l *loop) enroll(e Enrollment) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got[e.Target.GroupRef] = e.Hygiene
	if l.last == nil {
		l.last = map[liveness.GroupRef]Enrollment{}
	}
	l.last[e.Target.GroupRef] = e
	l.n++
	return nil
}

type fixture struct {
	reg  *Registry
	loop *loop
	now  time.Time
	prom *prometheus.Registry
	env  metadata.Env
}

// testProfiles are the fixture's liveness profiles: two at the floors and
// three below them, which configuration would refuse, to show that the
// registry holds every request to the floors on its own too.
var testProfiles = map[string]map[string]string{
	"idle":           {"liveness": "idle", "ghostIdleSeconds": "300"},
	"hb":             {"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "30"},
	"low-idle":       {"liveness": "idle", "ghostIdleSeconds": "5"},
	"low-hb":         {"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1", "heartbeatStartGraceSeconds": "0"},
	"k8s-tiny-idle":  {"liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs", "ghostIdleSeconds": "0.001"},
	"k8s-zero-grace": {"liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs", "podDeletionGraceSeconds": "0"},
}

func newFixture(t *testing.T, tune func(*config.Triggers)) *fixture {
	t.Helper()
	f := &fixture{loop: &loop{got: map[liveness.GroupRef]policy.Hygiene{}}, now: time.Unix(1_700_000_000, 0), prom: prometheus.NewRegistry()}
	cfg := config.Default()
	p := &cfg.Triggers
	p.Reclaim = policy.ReclaimRequeue
	p.WarmUp = time.Minute
	p.Profiles = testProfiles
	p.Rules = []config.TriggerRule{
		{Namespaces: []string{"*"}, Redis: []string{"default"}},
		{Namespaces: []string{"jobs"}, Redis: []string{"default"}, HygieneStreams: []string{"jobs*"}, Profiles: []string{"*"}},
	}
	if tune != nil {
		tune(p)
	}
	cfg.Kubernetes.Enabled = true
	f.env = cfg.Env()
	f.env.Conns = []string{"default", "orders"}
	f.reg = New(Options{Policy: *p, Shares: config.TriggerShares{Triggers: 1000, ScalerTargets: 1000, HygieneTargets: 1000}, Expiry: time.Minute,
		Enroll: f.loop.enroll, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return f.now }}, f.prom)
	return f
}

// md is a trigger of jobs/workers asking for requeue, judged by the idle
// profile; a key given "" is left out.
func md(kv ...string) map[string]string {
	out := map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue", "entryStaleSeconds": "60", "livenessProfile": "idle"}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
		if kv[i+1] == "" {
			delete(out, kv[i])
		}
	}
	return out
}

func (f *fixture) admit(t *testing.T, ns, name string, m map[string]string) error {
	t.Helper()
	env := f.env
	env.Namespace = ns
	r, err := metadata.ParseTrigger(m, env)
	require.NoError(t, err)
	return f.reg.Admit(IDOf(ns, name, m), &r)
}

var jobs = liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}

func TestAdmitRefusesHygieneByPolicyAndServesTheMetric(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		ns   string
		md   map[string]string
		tune func(*config.Triggers)
		code codes.Code
		key  string
	}{
		"trigger hygiene off":      {ns: "jobs", md: md(), tune: func(p *config.Triggers) { p.Reclaim = policy.ReclaimOff }, code: codes.PermissionDenied, key: "reclaim"},
		"claim":                    {ns: "jobs", md: md("reclaim", "claim"), code: codes.InvalidArgument, key: "reclaim"},
		"hard timeout":             {ns: "jobs", md: md("hardTimeoutSeconds", "600"), code: codes.InvalidArgument, key: "hardTimeoutSeconds"},
		"delete originals":         {ns: "jobs", md: md("deleteOriginal", "true"), code: codes.InvalidArgument, key: "deleteOriginal"},
		"carry field":              {ns: "jobs", md: md("deliveryCountField", "payload"), code: codes.InvalidArgument, key: "deliveryCountField"},
		"carry field off":          {ns: "jobs", md: md("deliveryCountField", "off"), code: codes.InvalidArgument, key: "deliveryCountField"},
		"dead letters elsewhere":   {ns: "jobs", md: md("maxDeliveries", "1", "deadLetterStream", "payments"), code: codes.InvalidArgument, key: "deadLetterStream"},
		"claim fallback":           {ns: "jobs", md: md("claimFallback", "skip"), code: codes.InvalidArgument, key: "claimFallback"},
		"malformed hygiene key":    {ns: "jobs", md: md("maxDeliveries", "many"), code: codes.InvalidArgument, key: "maxDeliveries"},
		"unknown reclaim mode":     {ns: "jobs", md: md("reclaim", "steal"), code: codes.InvalidArgument, key: "reclaim"},
		"entry stale below floor":  {ns: "jobs", md: md("entryStaleSeconds", "1e-9"), code: codes.InvalidArgument, key: "entryStaleSeconds"},
		"ghost idle below floor":   {ns: "jobs", md: md("livenessProfile", "low-idle"), code: codes.InvalidArgument, key: "ghostIdleSeconds"},
		"max age below floor":      {ns: "jobs", md: md("livenessProfile", "low-hb", "heartbeatStartGraceSeconds", "10"), code: codes.InvalidArgument, key: "heartbeatMaxAgeSeconds"},
		"start grace below floor":  {ns: "jobs", md: md("livenessProfile", "low-hb", "heartbeatMaxAgeSeconds", "10"), code: codes.InvalidArgument, key: "heartbeatStartGraceSeconds"},
		"kubernetes, ghost idle":   {ns: "jobs", md: md("livenessProfile", "k8s-tiny-idle"), code: codes.InvalidArgument, key: "ghostIdleSeconds"},
		"kubernetes, pod grace":    {ns: "jobs", md: md("livenessProfile", "k8s-zero-grace"), code: codes.InvalidArgument, key: "podDeletionGraceSeconds"},
		"dead letter at once":      {ns: "jobs", md: md("maxDeliveries", "1"), code: codes.InvalidArgument, key: "maxDeliveries"},
		"own evidence":             {ns: "jobs", md: md("livenessProfile", "", "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"), code: codes.PermissionDenied, key: "livenessProfile"},
		"own idle evidence":        {ns: "jobs", md: md("livenessProfile", "", "ghostIdleSeconds", "300"), code: codes.PermissionDenied, key: "livenessProfile"},
		"a stream no rule names":   {ns: "jobs", md: md("stream", "payments"), code: codes.PermissionDenied, key: "stream"},
		"a namespace no rule lets": {ns: "intruder", md: md(), tune: func(p *config.Triggers) { p.Rules[0].Profiles = []string{"idle"} }, code: codes.PermissionDenied, key: "stream"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(p *config.Triggers) {
				p.Rules[0].HeartbeatKeys = []string{"hb:*"}
				if tc.tune != nil {
					tc.tune(p)
				}
			})
			require.NoError(t, f.admit(t, tc.ns, "so", tc.md), "the metric is served")
			require.NoError(t, f.admit(t, tc.ns, "so", maps.Clone(tc.md)), "and again")
			require.Empty(t, f.loop.got, "nothing is enrolled")
			v, ok := f.reg.Describe(liveness.GroupRef{Conn: "default", Stream: tc.md["stream"], Group: "workers"})
			require.True(t, ok)
			require.Len(t, v.Refused, 1)
			require.Equal(t, tc.code, v.Refused[0].Refusal.Code, v.Refused[0].Refusal.Error())
			require.Equal(t, tc.key, v.Refused[0].Refusal.Key)
			require.Equal(t, "trigger "+tc.ns+"/so", v.Refused[0].From)
			require.InDelta(t, 2, testutil.ToFloat64(f.reg.refused[tc.code]), 0, "each refused request is counted")
		})
	}
}

func TestAdmitDeniesAConnectionTheNamespaceMayNotReachOnEveryRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	err := f.admit(t, "jobs", "so", md("redis", "orders", "reclaim", "", "livenessProfile", ""))
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Contains(t, err.Error(), `"orders"`)
	require.Contains(t, err.Error(), "triggers.rules")
}

func TestQuotasBoundEachNamespaceAndFreeUpWhenTriggersExpire(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *config.Triggers) { p.Quotas = config.TriggerQuotas{ScalerTargets: 2, HygieneTargets: 1} })
	require.NoError(t, f.admit(t, "jobs", "a", md()))
	require.NoError(t, f.admit(t, "jobs", "b", md("stream", "jobs-2")), "a second scaler target fits")
	v, _ := f.reg.Describe(liveness.GroupRef{Conn: "default", Stream: "jobs-2", Group: "workers"})
	require.Equal(t, codes.ResourceExhausted, v.Refused[0].Refusal.Code, "but not a second hygiene target")
	err := f.admit(t, "jobs", "c", md("stream", "jobs-3"))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "a third scaler target does not fit")
	require.Contains(t, err.Error(), "triggers.quotas.scalerTargets")
	require.NoError(t, f.admit(t, "other", "c", md("stream", "jobs-3", "reclaim", "", "livenessProfile", "")), "another namespace has its own quota")

	f.now = f.now.Add(50 * time.Second)
	require.NoError(t, f.admit(t, "jobs", "b", md("stream", "jobs-2")))
	f.now = f.now.Add(20 * time.Second)
	f.reg.Sweep() // a expires; b's hygiene gets the freed quota
	_, ok := f.reg.Describe(jobs)
	require.False(t, ok, "the expired trigger's group is forgotten")
	v, _ = f.reg.Describe(liveness.GroupRef{Conn: "default", Stream: "jobs-2", Group: "workers"})
	require.Empty(t, v.Refused)
	require.Equal(t, []string{"trigger jobs/b"}, v.Triggers)
}

func TestConfigTargetsWinOverTriggersAndCountAgainstNoQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *config.Triggers) { p.Quotas.HygieneTargets = 1 })
	r, err := metadata.Parse(md("entryStaleSeconds", "5", "deleteOriginal", "true"), f.env)
	require.NoError(t, err)
	require.NoError(t, f.reg.AddConfig(0, r))
	require.NoError(t, f.admit(t, "jobs", "a", md("entryStaleSeconds", "600")))
	require.NoError(t, f.admit(t, "jobs", "b", md("stream", "jobs-2")), "the config target did not use the quota")
	require.Equal(t, 5*time.Second, f.loop.got[jobs].EntryStale)
	require.True(t, f.loop.got[jobs].DeleteOriginal)
	v, _ := f.reg.Describe(jobs)
	require.Equal(t, "hygiene.targets[0]", source(Effective{Sources: v.Sources}, "entryStaleSeconds").From)
}

func TestExpiredTriggerLeavesTheMergeAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.NoError(t, f.admit(t, "jobs", "careful", md("entryStaleSeconds", "600")))
	require.NoError(t, f.admit(t, "jobs", "eager", md()))
	require.Equal(t, 600*time.Second, f.loop.got[jobs].EntryStale)
	f.now = f.now.Add(40 * time.Second)
	require.NoError(t, f.admit(t, "jobs", "eager", md()))
	f.now = f.now.Add(40 * time.Second)
	f.reg.Sweep()
	require.Equal(t, 60*time.Second, f.loop.got[jobs].EntryStale, "without the careful trigger, the eager one's settings")
	f.now = f.now.Add(2 * time.Minute)
	f.reg.Sweep()
	_, ok := f.reg.Describe(jobs)
	require.False(t, ok)
}

func TestAKnownTriggerCostsNoAllocation(t *testing.T) {
	f := newFixture(t, nil)
	m := md()
	r, err := metadata.ParseTrigger(m, f.env)
	require.NoError(t, err)
	id := IDOf("jobs", "so", m)
	require.NoError(t, f.reg.Admit(id, &r))
	allocs := testing.AllocsPerRun(100, func() { _ = f.reg.Admit(id, &r) })
	require.Zero(t, allocs)
}

func TestIDOfDependsOnTheMetadataNotOnTheOrderOfItsKeys(t *testing.T) {
	a := map[string]string{}
	b := map[string]string{}
	keys := []string{"stream", "consumerGroup", "pendingEntriesCount", "reclaim", "liveness"}
	for i, k := range keys {
		a[k] = k + "-value"
		b[keys[len(keys)-1-i]] = keys[len(keys)-1-i] + "-value"
	}
	require.Equal(t, IDOf("jobs", "so", a), IDOf("jobs", "so", b))
	require.NotEqual(t, IDOf("jobs", "so", a), IDOf("jobs", "other", a), "another ScaledObject")
	require.NotEqual(t, IDOf("jobs", "so", map[string]string{"ab": "c"}), IDOf("jobs", "so", map[string]string{"a": "bc"}),
		"a key and its value are hashed apart")
	b["stream"] = "orders"
	require.NotEqual(t, IDOf("jobs", "so", a), IDOf("jobs", "so", b), "another value")
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = IDOf("jobs", "so", a) }))
}

// BenchmarkAdmitKnownTrigger is the registry's share of every KEDA poll.
func BenchmarkAdmitKnownTrigger(b *testing.B) {
	f := &fixture{loop: &loop{got: map[liveness.GroupRef]policy.Hygiene{}}, now: time.Unix(1_700_000_000, 0)}
	cfg := config.Default()
	p := &cfg.Triggers
	p.Reclaim = policy.ReclaimRequeue
	p.Profiles = testProfiles
	p.Rules = []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}, HygieneStreams: []string{"*"}, Profiles: []string{"*"}}}
	f.reg = New(Options{Policy: *p, Shares: config.TriggerShares{Triggers: 10, ScalerTargets: 10, HygieneTargets: 10}, Expiry: time.Minute,
		Enroll: f.loop.enroll, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return f.now }}, prometheus.NewRegistry())
	m := md("scalerAddress", "pelwarden.pelwarden.svc:9090", "pendingEntriesCount", "5")
	env := cfg.Env()
	env.Conns, env.Namespace = []string{"default"}, "jobs"
	r, err := metadata.ParseTrigger(m, env)
	if err != nil {
		b.Fatal(err)
	}
	id := IDOf("jobs", "so", m)
	if err := f.reg.Admit(id, &r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = f.reg.Admit(id, &r)
	}
}

func TestARefusedTriggerIsLoggedOncePerRegistrationNotPerPoll(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var buf syncBuffer
	f.reg.opts.Log = slog.New(slog.NewTextHandler(&buf, nil))
	for range 50 {
		require.NoError(t, f.admit(t, "jobs", "so", md("deleteOriginal", "true")))
	}
	require.Equal(t, 1, strings.Count(buf.String(), "trigger hygiene refused"), buf.String())
	require.Contains(t, buf.String(), "deleteOriginal")
	require.InDelta(t, 50, testutil.ToFloat64(f.reg.refused[codes.InvalidArgument]), 0, "the counter counts every refused request")
	f.now = f.now.Add(2 * time.Minute)
	f.reg.Sweep()
	require.NoError(t, f.admit(t, "jobs", "so", md("deleteOriginal", "true")))
	require.Equal(t, 2, strings.Count(buf.String(), "trigger hygiene refused"), "again once the trigger was forgotten")
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
