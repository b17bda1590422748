package metadata

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// ProfileKey is the metadata key that names a liveness profile of the
// configuration (triggers.profiles).
const ProfileKey = "livenessProfile"

// EvidenceKeys say which evidence can mark a consumer dead: the sources,
// the keys read, how consumers map to owners, which pods. With
// livenessProfile the profile sets them and a trigger may not.
var EvidenceKeys = keyNames(KindEvidence)

// ThresholdKeys say how long the evidence must hold: a trigger that names
// a profile may make them longer, never shorter.
var ThresholdKeys = keyNames(KindThreshold)

// LivenessKeys are the keys a liveness profile holds: its evidence and
// its thresholds.
var LivenessKeys = slices.Concat(EvidenceKeys, ThresholdKeys)

// ParseProfile reads one liveness profile of the configuration. It holds
// the liveness keys only, read as in a trigger; with kubernetes,
// podNamespace is required, since a profile has no ScaledObject namespace
// to default to. Errors name the key.
func ParseProfile(md map[string]string, kubernetes bool) (liveness.Spec, error) {
	for k := range md {
		if !slices.Contains(LivenessKeys, k) {
			return liveness.Spec{}, &Error{Key: k, Accepted: "is not a liveness key; a profile holds only " + strings.Join(LivenessKeys, ", ")}
		}
	}
	s, err := parseSpec(fields{md: md}, Env{Kubernetes: kubernetes})
	var me *Error
	if errors.As(err, &me) && me.Key == KeyPodNamespace && md[KeyPodNamespace] == "" {
		return s, &Error{Key: KeyPodNamespace, Accepted: "is required with liveness kubernetes in a profile: a profile serves every namespace a rule lets name it"}
	}
	return s, err
}

// triggerSpec is the liveness spec of a trigger: its own keys, or, with
// livenessProfile, the profile's spec with the thresholds the trigger
// lengthens. It returns the profile's name, or "".
func triggerSpec(f fields, env Env) (liveness.Spec, string, error) {
	name, named := f.lookup(ProfileKey)
	if !named {
		s, err := parseSpec(f, env)
		return s, "", err
	}
	profile, ok := env.Profiles[name]
	if !ok || name == "" {
		return liveness.Spec{}, "", &Error{Key: ProfileKey, Accepted: "must name a profile of triggers.profiles in pelwarden's configuration", Got: name}
	}
	for _, k := range EvidenceKeys {
		if f.has(k) {
			return liveness.Spec{}, "", &Error{Key: k, Accepted: "is set by livenessProfile " + name + "; leave it out"}
		}
	}
	s := profile
	for _, th := range []struct {
		key  string
		used bool
		dst  *time.Duration
		read func() (time.Duration, error)
	}{
		{KeyGhostIdleSeconds, true, &s.GhostIdle, func() (time.Duration, error) { return seconds(f, KeyGhostIdleSeconds, 0) }},
		{KeyHeartbeatMaxAgeSeconds, true, &s.HeartbeatMaxAge, func() (time.Duration, error) { return seconds(f, KeyHeartbeatMaxAgeSeconds, 0) }},
		{KeyHeartbeatStartGraceSeconds, s.Heartbeat, &s.StartGrace, func() (time.Duration, error) {
			return graceSeconds(f, KeyHeartbeatStartGraceSeconds, 0, " (a worker must beat before its first read)")
		}},
		{KeyPodDeletionGraceSeconds, s.Kubernetes, &s.PodGrace, func() (time.Duration, error) {
			return graceSeconds(f, KeyPodDeletionGraceSeconds, 0, "")
		}},
	} {
		raw, set := f.lookup(th.key)
		if !set {
			continue
		}
		if !th.used {
			return liveness.Spec{}, "", &Error{Key: th.key, Accepted: "is not used by livenessProfile " + name, Got: raw}
		}
		v, err := th.read()
		if err != nil {
			return liveness.Spec{}, "", err
		}
		if v < *th.dst {
			return liveness.Spec{}, "", &Error{Key: th.key, Accepted: fmt.Sprintf("may only lengthen livenessProfile %s's %s s", name, trimSeconds(*th.dst)), Got: raw}
		}
		*th.dst = v
	}
	return s, name, nil
}

func trimSeconds(d time.Duration) string {
	return strings.TrimSuffix(fmt.Sprintf("%g", d.Seconds()), ".0")
}
