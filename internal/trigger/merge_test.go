package trigger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// member parses trigger metadata on top of a requeue trigger of jobs.
func member(t *testing.T, from string, kv ...string) Member {
	t.Helper()
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	r, err := metadata.Parse(md, metadata.Env{Conns: []string{"default"}, Namespace: "jobs", Kubernetes: true})
	require.NoError(t, err)
	return Member{From: from, Target: r.Target, Hygiene: r.Hygiene}
}

func source(e Effective, name string) Setting {
	for _, s := range e.Sources {
		if s.Name == name {
			return s
		}
	}
	return Setting{}
}

func TestMergeTakesTheMostConservativeSettingOfEach(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		a, b    []string
		check   func(t *testing.T, e Effective)
		setting string
		value   string
		from    string
	}{
		"longest entry staleness": {
			a: []string{"entryStaleSeconds", "30"}, b: []string{"entryStaleSeconds", "90"},
			setting: "entryStaleSeconds", value: "90", from: "b",
			check: func(t *testing.T, e Effective) { require.Equal(t, 90*time.Second, e.Hygiene.EntryStale) },
		},
		"longest ghost idle": {
			a: []string{"ghostIdleSeconds", "600"}, b: []string{"ghostIdleSeconds", "60"},
			setting: "ghostIdleSeconds", value: "600", from: "a",
			check: func(t *testing.T, e Effective) { require.Equal(t, 10*time.Minute, e.Target.Spec.GhostIdle) },
		},
		"longest heartbeat max age and start grace": {
			a:       []string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "20", "heartbeatStartGraceSeconds", "50"},
			b:       []string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "40"},
			setting: "heartbeatMaxAgeSeconds", value: "40", from: "b",
			check: func(t *testing.T, e Effective) {
				require.Equal(t, 40*time.Second, e.Target.Spec.HeartbeatMaxAge)
				require.Equal(t, 50*time.Second, e.Target.Spec.StartGrace)
				require.Empty(t, e.Conflict)
			},
		},
		"longest pod deletion grace": {
			a:       []string{"liveness", "kubernetes", "podSelector", "app=w", "podDeletionGraceSeconds", "2"},
			b:       []string{"liveness", "kubernetes", "podSelector", "app=w", "podDeletionGraceSeconds", "8"},
			setting: "podDeletionGraceSeconds", value: "8", from: "b",
			check: func(t *testing.T, e Effective) { require.Equal(t, 8*time.Second, e.Target.Spec.PodGrace) },
		},
		"no dead-lettering unless both dead-letter": {
			a: []string{"maxDeliveries", "3"}, b: []string{"maxDeliveries", "0"},
			setting: "maxDeliveries", value: "0", from: "b",
			check: func(t *testing.T, e Effective) {
				require.Zero(t, e.Hygiene.MaxDeliveries)
				require.Empty(t, e.Hygiene.DeadLetterStream)
			},
		},
		"the most deliveries when both dead-letter": {
			a: []string{"maxDeliveries", "3"}, b: []string{"maxDeliveries", "7"},
			setting: "maxDeliveries", value: "7", from: "b",
			check: func(t *testing.T, e Effective) { require.Equal(t, "jobs:dead", e.Hygiene.DeadLetterStream) },
		},
		"no hard timeout unless both have one": {
			a: []string{"hardTimeoutSeconds", "600"}, b: []string{},
			setting: "hardTimeoutSeconds", value: "0", from: "b",
			check: func(t *testing.T, e Effective) { require.Zero(t, e.Hygiene.HardTimeout) },
		},
		"the longest hard timeout when both have one": {
			a: []string{"hardTimeoutSeconds", "600"}, b: []string{"hardTimeoutSeconds", "900"},
			setting: "hardTimeoutSeconds", value: "900", from: "b",
		},
		"ghost consumers kept unless both delete them": {
			a: []string{"deleteGhostConsumers", "true"}, b: []string{"deleteGhostConsumers", "false"},
			setting: "deleteGhostConsumers", value: "false", from: "b",
			check: func(t *testing.T, e Effective) { require.False(t, e.Hygiene.DeleteGhostConsumers) },
		},
		"originals kept unless both delete them": {
			a: []string{"deleteOriginal", "true"}, b: []string{},
			setting: "deleteOriginal", value: "false", from: "b",
		},
		"a dry run if either asks": {
			a: []string{}, b: []string{"dryRun", "true"},
			setting: "dryRun", value: "true", from: "b",
			check: func(t *testing.T, e Effective) { require.True(t, e.Hygiene.DryRun) },
		},
		"requeue unless both claim": {
			a: []string{"reclaim", "claim"}, b: []string{},
			setting: "reclaim", value: "requeue", from: "b",
			check: func(t *testing.T, e Effective) { require.Equal(t, policy.ReclaimRequeue, e.Hygiene.Mode) },
		},
		"different liveness sources force a dry run": {
			a: []string{}, b: []string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"},
			setting: "dryRun", value: "true", from: "conflicting liveness settings",
			check: func(t *testing.T, e Effective) {
				require.True(t, e.Hygiene.DryRun)
				require.Contains(t, e.Conflict, "liveness settings differ")
				require.True(t, e.Target.Spec.Idle, "the spec of the first in order, whichever came first")
			},
		},
		"different heartbeat keys force a dry run": {
			a:       []string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"},
			b:       []string{"liveness", "heartbeat", "heartbeatKey", "nothing:{consumer}"},
			setting: "dryRun", value: "true", from: "conflicting liveness settings",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := member(t, "a", tc.a...), member(t, "b", tc.b...)
			for _, order := range [][]Member{{a, b}, {b, a}} {
				e := Merge(order)
				require.Equal(t, Setting{Name: tc.setting, Value: tc.value, From: tc.from}, source(e, tc.setting))
				if tc.check != nil {
					tc.check(t, e)
				}
				require.Equal(t, Merge([]Member{a, b}), e, "the order members came in changes nothing")
			}
		})
	}
}

func TestMergeOfOneMemberIsItsOwnSettings(t *testing.T) {
	t.Parallel()
	m := member(t, "hygiene.targets[0]", "maxDeliveries", "4", "deleteOriginal", "true", "hardTimeoutSeconds", "60")
	e := Merge([]Member{m})
	require.Equal(t, m.Hygiene, e.Hygiene)
	require.Equal(t, m.Target, e.Target)
	for _, s := range e.Sources {
		require.Equal(t, "hygiene.targets[0]", s.From, s.Name)
	}
	require.Equal(t, Effective{}, Merge(nil))
}
