package config

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Triggers is the operator's policy for what KEDA trigger metadata may ask
// of pelwarden. Whoever can write a ScaledObject, or reach grpc.addr, sends
// trigger metadata, so it may only ask within these bounds; the settings
// that destroy or move data (claim, hardTimeoutSeconds, deleteOriginal,
// deliveryCountField, a deadLetterStream other than <stream>:dead,
// claimFallback) are never accepted from a trigger, only in
// hygiene.targets. Nothing here limits hygiene.targets.
type Triggers struct {
	// Reclaim is the most a trigger may ask for: off (default; triggers
	// only read metrics) or requeue (a trigger with `reclaim: requeue` may
	// enroll its group in the hygiene loop, within rules, floors and
	// quotas). Claim is never a trigger's to ask.
	Reclaim policy.ReclaimMode `yaml:"reclaim"`
	// Floors are the shortest liveness and staleness thresholds a trigger
	// that asks for reclaim may give; a lower value refuses its hygiene.
	Floors TriggerFloors `yaml:"floors"`
	// Quotas bound what one ScaledObject namespace can register, so one
	// namespace cannot use up scaler.maxTargets for the others.
	Quotas TriggerQuotas `yaml:"quotas"`
	// Rules say which ScaledObject namespaces may reach which Redis
	// connections, enroll which streams in hygiene, name which liveness
	// profiles and heartbeat keys. A namespace no rule names may reach no
	// connection. A namespace a rule names literally (no glob) has its
	// quotas reserved inside the global caps. Default: one rule letting
	// every namespace read metrics from every connection, judged by idle
	// time only, and enroll no stream.
	Rules []TriggerRule `yaml:"rules"`
	// Profiles are the operator's ways to tell life, by name: each a map of
	// the liveness metadata keys only (liveness, ghostIdleSeconds,
	// heartbeatKey, heartbeatMaxAgeSeconds, heartbeatStartGraceSeconds,
	// ownerMatch, podSelector, podNamespace, podDeletionGraceSeconds),
	// read as trigger metadata is; podNamespace is required with
	// kubernetes, and every threshold the profile uses must meet the
	// floors. A trigger names one with `livenessProfile` where a rule's
	// profiles allow it; its metric and its group's hygiene are then
	// judged by the profile, and it may only lengthen the thresholds.
	// Trigger-driven hygiene needs one. Default: none.
	Profiles map[string]map[string]string `yaml:"profiles"`
	// WarmUp is how long trigger-driven hygiene waits before it acts,
	// after pelwarden starts and after a group's triggers or their merged
	// settings change, so that every trigger naming the group has polled
	// and the merge is the most conservative of all of them. Default 60s,
	// longer than KEDA's default pollingInterval (30s); raise it above the
	// longest pollingInterval of the ScaledObjects that enroll groups.
	// hygiene.targets never wait.
	WarmUp time.Duration `yaml:"warmUp"`
}

// TriggerFloors are lower bounds on the thresholds of a trigger that asks
// for reclaim. Each must be positive.
type TriggerFloors struct {
	// EntryStale bounds entryStaleSeconds. Default 30s, the metadata
	// default: an entry a trigger can have reclaimed has sat untouched
	// for at least this long.
	EntryStale time.Duration `yaml:"entryStale"`
	// GhostIdle bounds ghostIdleSeconds. Default 60s: a worker in a long
	// blocking read or a GC pause is not a ghost because a trigger said so.
	GhostIdle time.Duration `yaml:"ghostIdle"`
	// HeartbeatMaxAge bounds heartbeatMaxAgeSeconds (and the start grace,
	// which defaults to it). Default 10s: one missed beat of a worker that
	// beats every few seconds is not death.
	HeartbeatMaxAge time.Duration `yaml:"heartbeatMaxAge"`
	// PodDeletionGrace bounds podDeletionGraceSeconds. Default 2s, the
	// metadata default: a StatefulSet brings a pod of the same name back
	// within it.
	PodDeletionGrace time.Duration `yaml:"podDeletionGrace"`
	// MaxDeliveries bounds maxDeliveries: a trigger may have an entry
	// dead-lettered only after at least this many deliveries (its 0, never,
	// is always allowed). Default 3: one crash and one retry are not
	// poison. At least 1.
	MaxDeliveries int64 `yaml:"maxDeliveries"`
}

// Threshold is one liveness threshold of a spec and its floor.
type Threshold struct {
	// Key is the metadata key; Floor names the floor under triggers.floors.
	Key, Floor string
	Value, Min time.Duration
}

// Thresholds lists the liveness thresholds spec uses, each with its
// floor, whatever its liveness list says: the kubernetes source falls
// back to idle time for a consumer whose pod it cannot tell, so ghostIdle
// binds it too.
func (f TriggerFloors) Thresholds(spec liveness.Spec) []Threshold {
	var out []Threshold
	if spec.Idle || spec.Kubernetes {
		out = append(out, Threshold{metadata.KeyGhostIdleSeconds, "ghostIdle", spec.GhostIdle, f.GhostIdle})
	}
	if spec.Heartbeat {
		out = append(out, Threshold{metadata.KeyHeartbeatMaxAgeSeconds, "heartbeatMaxAge", spec.HeartbeatMaxAge, f.HeartbeatMaxAge},
			Threshold{metadata.KeyHeartbeatStartGraceSeconds, "heartbeatMaxAge", spec.StartGrace, f.HeartbeatMaxAge})
	}
	if spec.Kubernetes {
		out = append(out, Threshold{metadata.KeyPodDeletionGraceSeconds, "podDeletionGrace", spec.PodGrace, f.PodDeletionGrace})
	}
	return out
}

// TriggerQuotas bound each ScaledObject namespace. Targets from
// hygiene.targets never count.
type TriggerQuotas struct {
	// ScalerTargets is the most distinct targets (connection,
	// stream, group and liveness settings) one namespace's triggers may
	// have the scaler watch at once. Default 1000; at least 1.
	ScalerTargets int `yaml:"scalerTargets"`
	// HygieneTargets is the most groups one namespace's
	// triggers may enroll in the hygiene loop at once. Default 20; at least 1.
	HygieneTargets int `yaml:"hygieneTargets"`
}

// TriggerRule grants the ScaledObject namespaces it names access to Redis
// connections. Patterns are path.Match globs (`*`, `?`, `[a-z]`); `*`
// also matches the empty namespace of a caller that sends none.
type TriggerRule struct {
	// Namespaces are globs of ScaledObject namespaces. At least one.
	Namespaces []string `yaml:"namespaces"`
	// Redis are globs of connection names the namespaces may read metrics
	// from. At least one; each must match a configured connection.
	Redis []string `yaml:"redis"`
	// HygieneStreams are globs of the streams, on those connections, whose
	// groups the namespaces' triggers may enroll in hygiene when
	// triggers.reclaim is requeue. Empty: none.
	HygieneStreams []string `yaml:"hygieneStreams"`
	// Profiles are globs of the liveness profiles (triggers.profiles) the
	// namespaces' triggers may name with livenessProfile on those
	// connections. Each must match a profile. Empty: none.
	Profiles []string `yaml:"profiles"`
	// HeartbeatKeys are globs of the heartbeat key patterns the namespaces'
	// triggers may name themselves (heartbeatKey), for their own metric
	// only: a trigger's own evidence never judges hygiene. A glob is
	// matched against the pattern as written, placeholder included, so
	// "hb:*" admits "hb:{consumer}"; give a prefix ending in a separator
	// so that no glob reaches keys of other applications. Empty: none, and
	// pelwarden reads no key a trigger chose.
	HeartbeatKeys []string `yaml:"heartbeatKeys"`
}

// defaultTriggers is the policy of a fresh install: metrics for every
// namespace from every connection, as before there was a policy, and no
// trigger-driven hygiene.
func defaultTriggers() Triggers {
	return Triggers{
		Reclaim: policy.ReclaimOff,
		Floors: TriggerFloors{EntryStale: 30 * time.Second, GhostIdle: time.Minute, HeartbeatMaxAge: 10 * time.Second,
			PodDeletionGrace: metadata.DefaultPodDeletionGraceSeconds * time.Second, MaxDeliveries: 3},
		Quotas: TriggerQuotas{ScalerTargets: 1000, HygieneTargets: 20},
		Rules:  []TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}}},
		WarmUp: time.Minute,
	}
}

// maxFloor is the longest floor accepted, as long as metadata durations go.
const maxFloor = 366 * 24 * time.Hour

func (c *Config) validateTriggers(p *problems) {
	t := c.Triggers
	if t.Reclaim != policy.ReclaimOff && t.Reclaim != policy.ReclaimRequeue {
		p.add("triggers.reclaim", "must be off or requeue (claim is set per group in hygiene.targets only), got %q", t.Reclaim)
	}
	for _, f := range []struct {
		field string
		d     time.Duration
	}{
		{"triggers.floors.entryStale", t.Floors.EntryStale}, {"triggers.floors.ghostIdle", t.Floors.GhostIdle},
		{"triggers.floors.heartbeatMaxAge", t.Floors.HeartbeatMaxAge}, {"triggers.floors.podDeletionGrace", t.Floors.PodDeletionGrace},
		{"triggers.warmUp", t.WarmUp},
	} {
		if f.d < minDuration || f.d > maxFloor {
			p.add(f.field, "must be a positive duration of at least %s and at most %s, such as %q, got %q", minDuration, maxFloor, "30s", f.d)
		}
	}
	checkAtLeastOne(p, "triggers.floors.maxDeliveries", t.Floors.MaxDeliveries)
	checkAtLeastOne(p, "triggers.quotas.scalerTargets", int64(t.Quotas.ScalerTargets))
	checkAtLeastOne(p, "triggers.quotas.hygieneTargets", int64(t.Quotas.HygieneTargets))
	c.validateProfiles(p)
	enrolls := false
	for i, r := range t.Rules {
		at := fmt.Sprintf("triggers.rules[%d]", i)
		checkGlobs(p, at+".namespaces", r.Namespaces, true)
		checkGlobs(p, at+".redis", r.Redis, true)
		checkGlobs(p, at+".hygieneStreams", r.HygieneStreams, false)
		checkGlobs(p, at+".profiles", r.Profiles, false)
		checkGlobs(p, at+".heartbeatKeys", r.HeartbeatKeys, false)
		for j, g := range r.Redis {
			if len(c.Redis) > 0 && !c.matchesConnection(g) {
				p.add(fmt.Sprintf("%s.redis[%d]", at, j), "matches no connection named in redis, got %q", g)
			}
		}
		for j, g := range r.Profiles {
			// A name is a typo if no profile has it; a glob may be written
			// for profiles to come.
			if !strings.ContainsAny(g, `*?[\`) && t.Profiles[g] == nil {
				p.add(fmt.Sprintf("%s.profiles[%d]", at, j), "names no profile of triggers.profiles, got %q", g)
			}
		}
		enrolls = enrolls || len(r.HygieneStreams) > 0
	}
	if t.Reclaim == policy.ReclaimRequeue && !enrolls {
		p.add("triggers.reclaim", "is requeue but no triggers.rules entry has hygieneStreams, so no trigger could enroll a group; add one such as {namespaces: [jobs], redis: [default], hygieneStreams: [\"jobs*\"], profiles: [jobs]}")
	}
	c.validateShares(p)
}

// profileName is what a profile may be called: it is written in trigger
// metadata and shown in logs.
var profileName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// validateProfiles parses each profile as trigger metadata is parsed, and
// holds every threshold it uses to the floors: a profile exists for
// triggers, and one below a floor would only ever refuse them.
func (c *Config) validateProfiles(p *problems) {
	for _, name := range slices.Sorted(maps.Keys(c.Triggers.Profiles)) {
		at := "triggers.profiles." + name
		if !profileName.MatchString(name) {
			p.add(at, "a profile name must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit, got %q", name)
			continue
		}
		spec, err := metadata.ParseProfile(c.Triggers.Profiles[name], c.Kubernetes.Enabled)
		var me *metadata.Error
		switch {
		case errors.As(err, &me):
			p.add(at+"."+me.Key, "%s", strings.TrimPrefix(me.Error(), fmt.Sprintf("metadata %q: ", me.Key)))
			continue
		case err != nil:
			p.add(at, "%v", err)
			continue
		}
		for _, th := range c.Triggers.Floors.Thresholds(spec) {
			if th.Value < th.Min {
				p.add(at+"."+th.Key, "must be at least triggers.floors.%s (%s), got %s", th.Floor, th.Min, th.Value)
			}
		}
	}
}

// Profiles returns the profiles of triggers.profiles that parse, by name.
func (c *Config) Profiles() map[string]liveness.Spec {
	out := make(map[string]liveness.Spec, len(c.Triggers.Profiles))
	for name, md := range c.Triggers.Profiles {
		if spec, err := metadata.ParseProfile(md, c.Kubernetes.Enabled); err == nil {
			out[name] = spec
		}
	}
	return out
}

// Env is what trigger metadata and hygiene.targets are parsed against.
func (c *Config) Env() metadata.Env {
	names := make([]string, 0, len(c.Redis))
	conns := make([]metadata.Connection, 0, len(c.Redis))
	for _, r := range c.Redis {
		names = append(names, r.Name)
		conns = append(conns, r.connection())
	}
	return metadata.Env{Conns: names, Kubernetes: c.Kubernetes.Enabled, Profiles: c.Profiles(), Connections: conns,
		Reaches: c.Triggers.Reaches}
}

// connection describes r for the connection keys of a trigger moved from
// KEDA's scalers.
func (r Redis) connection() metadata.Connection {
	m := metadata.Connection{Name: r.Name, DB: r.DB, TLS: r.TLS.Enabled, InsecureSkipVerify: r.TLS.InsecureSkipVerify}
	switch r.Mode {
	case RedisCluster:
		m.Cluster, m.Addrs = true, r.Cluster.Addrs
	case RedisSentinel:
		m.SentinelMaster, m.Addrs = r.Sentinel.MasterName, r.Sentinel.Addrs
	default:
		m.Addrs = []string{r.Addr}
	}
	return m
}

// Reaches says some rule lets namespace ns read metrics from connection
// conn.
func (t Triggers) Reaches(ns, conn string) bool {
	for _, r := range t.Rules {
		if MatchAny(r.Namespaces, ns) && MatchAny(r.Redis, conn) {
			return true
		}
	}
	return false
}

// MatchAny says name matches one of globs, the patterns of the triggers'
// rules; Validate has checked that every glob is a valid pattern.
func MatchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// checkGlobs checks a list of path.Match patterns: no empty item, each a
// valid pattern, and at least one where required.
func checkGlobs(p *problems, field string, globs []string, required bool) {
	if required && len(globs) == 0 {
		p.add(field, "must list at least one name or glob such as %q", "*")
	}
	for i, g := range globs {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "must be a name or a path.Match glob (*, ?, [a-z]), got %q", g)
		}
	}
}

func (c *Config) matchesConnection(glob string) bool {
	for _, r := range c.Redis {
		if ok, _ := path.Match(glob, r.Name); ok {
			return true
		}
	}
	return false
}
