package trigger

import "github.com/pelwarden/pelwarden/internal/config"

// share is one global cap split between namespaces. A ScaledObjectRef's
// namespace is whatever its caller says, so one caller can claim as many
// namespaces as it likes: a per-namespace quota alone lets it fill any
// global cap. Each namespace the rules name literally has its quota
// reserved instead: it may always hold that many, whatever others hold.
// The cap less the reservations is shared first come, first served by
// the slots namespaces hold beyond their reservation (every slot, for a
// namespace with none), each namespace still bounded by its quota.
//
// A namespace's holding is counted by its caller (triggers, targets or
// groups of the namespace), before a slot is taken or given back; the
// share keeps only how many shared slots are taken.
type share struct {
	shared   int
	reserve  int
	reserved map[string]bool
	spilled  int
}

// newShare splits global between the reserved namespaces, each keeping
// reserve slots, and the rest. Configuration has checked that the
// reservations fit; if they do not, the shared part is empty.
func newShare(global, reserve int, reserved map[string]bool) *share {
	return &share{shared: max(0, global-reserve*len(reserved)), reserve: reserve, reserved: reserved}
}

func (s *share) reserveOf(ns string) int {
	if s.reserved[ns] {
		return s.reserve
	}
	return 0
}

// fits says ns, holding held slots, may take one more.
func (s *share) fits(ns string, held int) bool {
	return held < s.reserveOf(ns) || s.spilled < s.shared
}

// take records that ns, holding held slots, takes one more.
func (s *share) take(ns string, held int) {
	if held >= s.reserveOf(ns) {
		s.spilled++
	}
}

// give records that ns, holding held slots, gives one back.
func (s *share) give(ns string, held int) {
	if held > s.reserveOf(ns) {
		s.spilled--
	}
}

// caps are the three global caps triggers are held to.
type caps struct {
	triggers, targets, groups *share
}

func newCaps(s config.TriggerShares, q config.TriggerQuotas) caps {
	all := make(map[string]bool, len(s.Reserved))
	enrolling := map[string]bool{}
	for ns, hygiene := range s.Reserved {
		all[ns] = true
		if hygiene {
			enrolling[ns] = true
		}
	}
	return caps{
		// A namespace's triggers are reserved one per scaler target of its
		// quota; more triggers than targets share the rest.
		triggers: newShare(s.Triggers, q.ScalerTargets, all),
		targets:  newShare(s.ScalerTargets, q.ScalerTargets, all),
		groups:   newShare(s.HygieneTargets, q.HygieneTargets, enrolling),
	}
}
