package config

import (
	"fmt"
	"path"
	"time"

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
	// connections, and enroll which streams in hygiene. A namespace no rule
	// names may reach no connection. Default: one rule letting every
	// namespace read metrics from every connection and enroll no stream.
	Rules []TriggerRule `yaml:"rules"`
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
}

// defaultTriggers is the policy of a fresh install: metrics for every
// namespace from every connection, as before there was a policy, and no
// trigger-driven hygiene.
func defaultTriggers() Triggers {
	return Triggers{
		Reclaim: policy.ReclaimOff,
		Floors:  TriggerFloors{EntryStale: 30 * time.Second, GhostIdle: time.Minute, HeartbeatMaxAge: 10 * time.Second},
		Quotas:  TriggerQuotas{ScalerTargets: 1000, HygieneTargets: 20},
		Rules:   []TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}}},
	}
}

// maxFloor is the longest floor accepted, as long as metadata durations go.
const maxFloor = 366 * 24 * time.Hour

func (c *Config) validateTriggers(p *problems) {
	t := c.Triggers
	if t.Reclaim != policy.ReclaimOff && t.Reclaim != policy.ReclaimRequeue {
		p.add("triggers.reclaim", "must be off or requeue (claim is set per group in hygiene.targets only), got %q", t.Reclaim)
	}
	for field, d := range map[string]time.Duration{
		"triggers.floors.entryStale": t.Floors.EntryStale, "triggers.floors.ghostIdle": t.Floors.GhostIdle,
		"triggers.floors.heartbeatMaxAge": t.Floors.HeartbeatMaxAge,
	} {
		if d <= 0 || d > maxFloor {
			p.add(field, "must be a positive duration of at most %s, such as %q, got %q", maxFloor, "30s", d)
		}
	}
	checkAtLeastOne(p, "triggers.quotas.scalerTargets", int64(t.Quotas.ScalerTargets))
	checkAtLeastOne(p, "triggers.quotas.hygieneTargets", int64(t.Quotas.HygieneTargets))
	enrolls := false
	for i, r := range t.Rules {
		at := fmt.Sprintf("triggers.rules[%d]", i)
		checkGlobs(p, at+".namespaces", r.Namespaces, true)
		checkGlobs(p, at+".redis", r.Redis, true)
		checkGlobs(p, at+".hygieneStreams", r.HygieneStreams, false)
		for j, g := range r.Redis {
			if len(c.Redis) > 0 && !c.matchesConnection(g) {
				p.add(fmt.Sprintf("%s.redis[%d]", at, j), "matches no connection named in redis, got %q", g)
			}
		}
		enrolls = enrolls || len(r.HygieneStreams) > 0
	}
	if t.Reclaim == policy.ReclaimRequeue && !enrolls {
		p.add("triggers.reclaim", "is requeue but no triggers.rules entry has hygieneStreams, so no trigger could enroll a group; add one such as {namespaces: [jobs], redis: [default], hygieneStreams: [\"jobs*\"]}")
	}
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
