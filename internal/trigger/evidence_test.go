package trigger

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// metricOnly is a trigger of jobs/workers that asks for no hygiene.
func metricOnly(kv ...string) map[string]string {
	return md(append([]string{"reclaim", "", "entryStaleSeconds", "", "livenessProfile", ""}, kv...)...)
}

func TestEvidenceNoRuleAllowsRefusesEveryRPC(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		ns       string
		md       map[string]string
		key, cfg string // the refused key and the setting named; "" admits
	}{
		"a profile no rule lets the namespace name": {
			ns: "intruder", md: metricOnly("livenessProfile", "hb"), key: "livenessProfile", cfg: "triggers.rules[].profiles",
		},
		"a profile its rule allows": {ns: "jobs", md: metricOnly("livenessProfile", "hb")},
		"a heartbeat key outside the globs": {
			ns: "jobs", md: metricOnly("liveness", "heartbeat", "heartbeatKey", "secre{owner}:db-password", "ownerMatch", "regex:(?P<owner>t)-0$"),
			key: "heartbeatKey", cfg: "triggers.rules[].heartbeatKeys",
		},
		"a heartbeat key the glob matches, placeholder and all": {
			ns: "jobs", md: metricOnly("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"),
		},
		"a heartbeat key of a namespace with no glob": {
			ns: "intruder", md: metricOnly("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"), key: "heartbeatKey", cfg: "triggers.rules[].heartbeatKeys",
		},
		"idle time, which reads no key": {ns: "intruder", md: metricOnly("ghostIdleSeconds", "1")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(p *config.Triggers) {
				p.Rules[1].HeartbeatKeys = []string{"hb:*"}
			})
			env := f.env
			env.Namespace = tc.ns
			r, err := metadata.ParseTrigger(tc.md, env)
			require.NoError(t, err)
			checked := f.reg.Check(tc.ns, r)
			err = f.reg.Admit(IDOf(tc.ns, "so", tc.md), &r)
			if tc.key == "" {
				require.NoError(t, err)
				require.Nil(t, checked.Denied)
				return
			}
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			require.Contains(t, err.Error(), tc.cfg)
			require.NotNil(t, checked.Denied, "CheckTrigger answers as the scaler does")
			require.Equal(t, tc.key, checked.Denied.Key)
			_, known := f.reg.Describe(jobs)
			require.False(t, known, "a denied trigger is not remembered")
		})
	}
}

func TestTheDefaultPolicyLetsNoTriggerChooseAKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *config.Triggers) { *p = config.Default().Triggers })
	m := metricOnly("liveness", "heartbeat", "heartbeatKey", "{consumer}")
	env := f.env
	env.Namespace = "jobs"
	r, err := metadata.ParseTrigger(m, env)
	require.NoError(t, err)
	err = f.reg.Admit(IDOf("jobs", "so", m), &r)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "heartbeatKeys")
}

func TestGroupsOfTriggersWarmUpAfterStartAndAfterEveryChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	start := f.now
	f.now = start.Add(10 * time.Second)
	require.NoError(t, f.admit(t, "jobs", "a", md()))
	e := f.loop.last[jobs]
	require.Equal(t, start.Add(10*time.Second+time.Minute), e.ActFrom, "a minute after the first trigger joined")
	require.Contains(t, e.WarmUp.String(), "pelwarden started")
	require.Contains(t, e.WarmUp.String(), "trigger jobs/a joined")

	f.now = f.now.Add(30 * time.Second)
	require.NoError(t, f.admit(t, "jobs", "a", md()), "a known trigger's poll")
	f.now = f.now.Add(time.Minute)
	require.NoError(t, f.admit(t, "jobs", "a", md()), "a poll that pushes to keep the target")
	require.Equal(t, start.Add(70*time.Second), f.loop.last[jobs].ActFrom, "polls change nothing")

	f.now = start.Add(2 * time.Minute)
	require.NoError(t, f.admit(t, "jobs", "b", md("entryStaleSeconds", "600")))
	e = f.loop.last[jobs]
	require.Equal(t, f.now.Add(time.Minute), e.ActFrom, "a member that joins starts the warm-up again")
	require.Contains(t, e.WarmUp.String(), "trigger jobs/b joined")
	require.NotContains(t, e.WarmUp.String(), "pelwarden started")

	f.now = f.now.Add(50 * time.Second)
	require.NoError(t, f.admit(t, "jobs", "a", md()))
	f.now = f.now.Add(20 * time.Second)
	f.reg.Sweep() // b expires: the merge is the eager one's again
	e = f.loop.last[jobs]
	require.Equal(t, 60*time.Second, e.Hygiene.EntryStale)
	require.Equal(t, f.now.Add(time.Minute), e.ActFrom, "a member that leaves starts it again")
	require.Contains(t, e.WarmUp.String(), "trigger jobs/b left")

	r, err := metadata.Parse(md("stream", "jobs-2"), f.env)
	require.NoError(t, err)
	require.NoError(t, f.reg.AddConfig(0, r))
	require.Zero(t, f.loop.last[liveness.GroupRef{Conn: "default", Stream: "jobs-2", Group: "workers"}].ActFrom, "hygiene.targets never wait")
}

// TestClaimedNamespacesCannotTakeWhatIsReservedForNamedOnes fills every
// cap from namespaces no rule names literally; the namespace a rule names
// is still admitted and enrolled, up to its quota.
func TestClaimedNamespacesCannotTakeWhatIsReservedForNamedOnes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *config.Triggers) {
		p.Quotas = config.TriggerQuotas{ScalerTargets: 3, HygieneTargets: 2}
		p.Rules = append(p.Rules, config.TriggerRule{Namespaces: []string{"claimed-*"}, Redis: []string{"*"}, HygieneStreams: []string{"*"}, Profiles: []string{"*"}})
	})
	cfg := config.Default()
	cfg.Triggers = f.reg.opts.Policy
	shares := config.TriggerShares{Triggers: 20, ScalerTargets: 10, HygieneTargets: 6, Reserved: map[string]bool{"jobs": true}}
	f.reg.caps = newCaps(shares, cfg.Triggers.Quotas)

	refused := 0
	for i := range 10 {
		ns := fmt.Sprintf("claimed-%d", i)
		for j := range 3 {
			err := f.admit(t, ns, "so", md("stream", fmt.Sprintf("flood-%d-%d", i, j)))
			if status.Code(err) == codes.ResourceExhausted {
				refused++
				continue
			}
			require.NoError(t, err)
		}
	}
	require.Equal(t, 30-(10-3), refused, "claimed namespaces hold the unreserved 7 targets only")
	enrolled := 0
	for ref := range f.loop.got {
		if ref.Stream != "jobs" {
			enrolled++
		}
	}
	require.Equal(t, 6-2, enrolled, "and the unreserved 4 groups")

	for i, stream := range []string{"jobs", "jobs-1", "jobs-2"} {
		require.NoError(t, f.admit(t, "jobs", fmt.Sprint("so-", i), md("stream", stream)), "the named namespace's own quota")
	}
	require.Contains(t, f.loop.got, jobs, "and it enrolls its groups")
	require.Contains(t, f.loop.got, liveness.GroupRef{Conn: "default", Stream: "jobs-1", Group: "workers"})
	err := f.admit(t, "jobs", "so-4", md("stream", "jobs-4"))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past its quota it is refused as any other")

	f.now = f.now.Add(2 * time.Minute)
	for i, stream := range []string{"jobs", "jobs-1", "jobs-2"} {
		require.NoError(t, f.admit(t, "jobs", fmt.Sprint("so-", i), md("stream", stream)))
	}
	f.reg.Sweep() // the claimed namespaces' triggers expire
	require.Equal(t, shareState{0, 0, 0}, shareState{f.reg.caps.triggers.spilled, f.reg.caps.targets.spilled, f.reg.caps.groups.spilled},
		"every shared slot is given back")
	require.NoError(t, f.admit(t, "claimed-0", "so", md("stream", "flood-0-0")), "room again")
}

type shareState struct{ triggers, targets, groups int }

func TestMergeOfTriggersOfOneProfileKeepsItsEvidence(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(p *config.Triggers) { p.Reclaim = policy.ReclaimRequeue })
	require.NoError(t, f.admit(t, "jobs", "a", md("livenessProfile", "hb", "heartbeatMaxAgeSeconds", "60")))
	require.NoError(t, f.admit(t, "jobs", "b", md("livenessProfile", "hb")))
	e := f.loop.last[jobs]
	require.Equal(t, "hb:{consumer}", e.Target.Spec.HeartbeatKey, "the profile's key, whoever names it")
	require.Equal(t, time.Minute, e.Target.Spec.HeartbeatMaxAge, "the longest max age")
	require.False(t, e.Hygiene.DryRun)
}
