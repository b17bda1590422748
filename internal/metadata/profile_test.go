package metadata

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// profileEnv has two profiles: heartbeats per consumer, and pods.
func profileEnv(t *testing.T) Env {
	t.Helper()
	hb, err := ParseProfile(map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "30"}, true)
	require.NoError(t, err)
	pods, err := ParseProfile(map[string]string{"liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs"}, true)
	require.NoError(t, err)
	env := testEnv
	env.Profiles = map[string]liveness.Spec{"hb": hb, "pods": pods}
	return env
}

func TestATriggerNamingAProfileIsJudgedByItsSpec(t *testing.T) {
	t.Parallel()
	env := profileEnv(t)
	r, err := ParseTrigger(base("livenessProfile", "hb", "heartbeatMaxAgeSeconds", "60", "reclaim", "requeue"), env)
	require.NoError(t, err)
	require.Equal(t, "hb", r.Profile)
	require.Nil(t, r.HygieneErr)
	require.Equal(t, "hb:{consumer}", r.Target.Spec.HeartbeatKey, "the profile's key")
	require.Equal(t, time.Minute, r.Target.Spec.HeartbeatMaxAge, "lengthened by the trigger")
	require.Equal(t, 30*time.Second, r.Target.Spec.StartGrace, "the profile's start grace, its max age")

	r, err = ParseTrigger(base("livenessProfile", "pods", "podDeletionGraceSeconds", "5"), env)
	require.NoError(t, err)
	require.Equal(t, "jobs", r.Target.Spec.PodNamespace)
	require.Equal(t, 5*time.Second, r.Target.Spec.PodGrace)

	r, err = ParseTrigger(base(), env)
	require.NoError(t, err)
	require.Empty(t, r.Profile, "no profile: the trigger's own keys")
}

func TestATriggerNamingAProfileMayNotChooseEvidenceNorShortenAThreshold(t *testing.T) {
	t.Parallel()
	env := profileEnv(t)
	cases := map[string]struct {
		md       map[string]string
		key      string
		accepted string
	}{
		"an unknown profile":     {md: base("livenessProfile", "nope"), key: "livenessProfile", accepted: "triggers.profiles"},
		"an empty profile":       {md: base("livenessProfile", ""), key: "livenessProfile", accepted: "triggers.profiles"},
		"its own heartbeat key":  {md: base("livenessProfile", "hb", "heartbeatKey", "hb:ghost-{owner}"), key: "heartbeatKey", accepted: "set by livenessProfile hb"},
		"its own owner match":    {md: base("livenessProfile", "hb", "ownerMatch", "regex:(?P<owner>1)$"), key: "ownerMatch", accepted: "set by livenessProfile hb"},
		"its own sources":        {md: base("livenessProfile", "hb", "liveness", "idle"), key: "liveness", accepted: "set by livenessProfile hb"},
		"its own pods":           {md: base("livenessProfile", "pods", "podSelector", "app=x"), key: "podSelector", accepted: "set by livenessProfile pods"},
		"its own pod namespace":  {md: base("livenessProfile", "pods", "podNamespace", "other"), key: "podNamespace", accepted: "set by livenessProfile pods"},
		"a shorter max age":      {md: base("livenessProfile", "hb", "heartbeatMaxAgeSeconds", "1"), key: "heartbeatMaxAgeSeconds", accepted: "hb's 30 s"},
		"a shorter ghost idle":   {md: base("livenessProfile", "pods", "ghostIdleSeconds", "0.001"), key: "ghostIdleSeconds", accepted: "pods's 300 s"},
		"a shorter pod grace":    {md: base("livenessProfile", "pods", "podDeletionGraceSeconds", "0"), key: "podDeletionGraceSeconds", accepted: "pods's 2 s"},
		"a shorter start grace":  {md: base("livenessProfile", "hb", "heartbeatStartGraceSeconds", "0"), key: "heartbeatStartGraceSeconds", accepted: "hb's 30 s"},
		"a threshold not used":   {md: base("livenessProfile", "hb", "podDeletionGraceSeconds", "9"), key: "podDeletionGraceSeconds", accepted: "not used"},
		"a malformed threshold":  {md: base("livenessProfile", "hb", "heartbeatMaxAgeSeconds", "soon"), key: "heartbeatMaxAgeSeconds", accepted: "seconds"},
		"a threshold in the NaN": {md: base("livenessProfile", "hb", "heartbeatMaxAgeSeconds", "NaN"), key: "heartbeatMaxAgeSeconds", accepted: "seconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseTrigger(tc.md, env)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.key, me.Key)
			require.Contains(t, me.Error(), tc.accepted)
		})
	}
}

func TestAProfileHoldsOnlyLivenessKeys(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		md  map[string]string
		key string
	}{
		"a hygiene key":                   {md: map[string]string{"reclaim": "requeue"}, key: "reclaim"},
		"a target key":                    {md: map[string]string{"stream": "jobs"}, key: "stream"},
		"a profile in a profile":          {md: map[string]string{"livenessProfile": "x"}, key: "livenessProfile"},
		"kubernetes without namespace":    {md: map[string]string{"liveness": "kubernetes", "podSelector": "app=w"}, key: "podNamespace"},
		"heartbeat without key":           {md: map[string]string{"liveness": "heartbeat"}, key: "heartbeatKey"},
		"a bad owner match":               {md: map[string]string{"ownerMatch": "regex:("}, key: "ownerMatch"},
		"a threshold of the wrong source": {md: map[string]string{"podDeletionGraceSeconds": "3"}, key: "podDeletionGraceSeconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseProfile(tc.md, true)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.key, me.Key)
		})
	}
	s, err := ParseProfile(map[string]string{}, false)
	require.NoError(t, err, "an empty profile is idle time with the defaults")
	require.True(t, s.Idle)
}

// FuzzTriggerProfile parses arbitrary metadata against two
// profiles: it never panics, an error names a key, and an accepted
// trigger that names a profile has the profile's evidence and thresholds
// at least the profile's.
func FuzzTriggerProfile(f *testing.F) {
	for _, seed := range [][2]string{
		{"livenessProfile", "hb"}, {"livenessProfile", "pods"}, {"heartbeatKey", "hb:ghost-{owner}"},
		{"heartbeatMaxAgeSeconds", "0.001"}, {"podDeletionGraceSeconds", "0"}, {"ghostIdleSeconds", "1e9"},
		{"heartbeatStartGraceSeconds", "-1"}, {"livenessProfile", "\x00"},
	} {
		f.Add("hb", seed[0], seed[1])
		f.Add("pods", seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, profile, key, value string) {
		env := profileEnv(t)
		md := base("livenessProfile", profile, key, value)
		r, err := ParseTrigger(md, env)
		if err != nil {
			var me *Error
			require.ErrorAs(t, err, &me)
			require.NotEmpty(t, me.Key)
			return
		}
		p, ok := env.Profiles[r.Profile]
		require.True(t, ok, "an accepted trigger names a known profile, got %q", r.Profile)
		s := r.Target.Spec
		require.Equal(t, p.HeartbeatKey, s.HeartbeatKey)
		require.Equal(t, p.Owner.String(), s.Owner.String())
		require.Equal(t, p.PodSet(), s.PodSet())
		require.Equal(t, [3]bool{p.Idle, p.Heartbeat, p.Kubernetes}, [3]bool{s.Idle, s.Heartbeat, s.Kubernetes})
		require.GreaterOrEqual(t, s.GhostIdle, p.GhostIdle)
		require.GreaterOrEqual(t, s.HeartbeatMaxAge, p.HeartbeatMaxAge)
		require.GreaterOrEqual(t, s.StartGrace, p.StartGrace)
		require.GreaterOrEqual(t, s.PodGrace, p.PodGrace)
	})
}
