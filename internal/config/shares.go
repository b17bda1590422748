package config

import (
	"strings"

	"github.com/pelwarden/pelwarden/internal/policy"
)

// TriggerShares are the parts of the global caps that triggers may hold,
// and the namespaces that have their quotas reserved inside them.
//
// The namespace of a ScaledObjectRef is whatever the caller says it is,
// so a caller can claim any number of namespaces. A namespace that a rule
// names literally is one the operator knows: its quotas are set aside in
// every cap, and triggers of other namespaces can never take them. The
// rest of each cap is shared first come, first served, each namespace
// holding at most its quota.
type TriggerShares struct {
	// Triggers bounds the triggers remembered at once: twice
	// scaler.maxTargets.
	Triggers int
	// ScalerTargets bounds the liveness-view targets of triggers:
	// scaler.maxTargets less the targets the hygiene loop may add to the
	// view beside them (one per group it looks after: hygiene.maxTargets
	// when triggers may enroll, else the hygiene.targets).
	ScalerTargets int
	// HygieneTargets bounds the groups triggers enroll: hygiene.maxTargets
	// less the hygiene.targets, which count against it.
	HygieneTargets int
	// Reserved are the namespaces named literally in triggers.rules; a
	// namespace true in it also reserves its hygiene quota, as a rule that
	// names it lets it enroll streams.
	Reserved map[string]bool
}

// TriggerShares works out the shares from the configuration.
func (c *Config) TriggerShares() TriggerShares {
	s := TriggerShares{Triggers: 2 * c.Scaler.MaxTargets, Reserved: map[string]bool{}}
	enrolls := c.Triggers.Reclaim == policy.ReclaimRequeue
	loop := len(c.Hygiene.Targets)
	if enrolls {
		loop = max(c.Hygiene.MaxTargets, loop)
		s.HygieneTargets = max(0, c.Hygiene.MaxTargets-len(c.Hygiene.Targets))
	}
	s.ScalerTargets = max(0, c.Scaler.MaxTargets-loop)
	for _, r := range c.Triggers.Rules {
		for _, ns := range r.Namespaces {
			if ns != "" && !strings.ContainsAny(ns, `*?[\`) {
				s.Reserved[ns] = s.Reserved[ns] || (enrolls && len(r.HygieneStreams) > 0)
			}
		}
	}
	return s
}

// reservedHygiene counts the namespaces that reserve hygiene quota.
func (s TriggerShares) reservedHygiene() int {
	n := 0
	for _, h := range s.Reserved {
		if h {
			n++
		}
	}
	return n
}

// validateShares checks that triggers have room in each cap, and that the
// reservations fit in it.
func (c *Config) validateShares(p *problems) {
	if c.Scaler.MaxTargets < 1 || c.Hygiene.MaxTargets < 1 {
		return // reported as such
	}
	s := c.TriggerShares()
	q := c.Triggers.Quotas
	if s.ScalerTargets < 1 {
		p.add("scaler.maxTargets", "must be more than the targets the hygiene loop may hold (%s), which share the liveness view with triggers; got %d",
			loopHolds(c), c.Scaler.MaxTargets)
		return
	}
	if n := len(s.Reserved); q.ScalerTargets > 0 && n*q.ScalerTargets > s.ScalerTargets {
		p.add("triggers.rules", "name %d namespaces literally, each reserving triggers.quotas.scalerTargets (%d) targets: %d, more than the %d that scaler.maxTargets leaves to triggers; lower the quota, raise scaler.maxTargets, or name fewer namespaces literally",
			n, q.ScalerTargets, n*q.ScalerTargets, s.ScalerTargets)
	}
	if n := s.reservedHygiene(); q.HygieneTargets > 0 && n*q.HygieneTargets > s.HygieneTargets {
		p.add("triggers.rules", "name %d namespaces literally in rules with hygieneStreams, each reserving triggers.quotas.hygieneTargets (%d) groups: %d, more than the %d that hygiene.maxTargets leaves to triggers beside hygiene.targets; lower the quota, raise hygiene.maxTargets, or name fewer namespaces literally",
			n, q.HygieneTargets, n*q.HygieneTargets, s.HygieneTargets)
	}
}

func loopHolds(c *Config) string {
	if c.Triggers.Reclaim == policy.ReclaimRequeue {
		return "hygiene.maxTargets, as triggers.reclaim is requeue"
	}
	return "the hygiene.targets"
}
