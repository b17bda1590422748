package app

import (
	"slices"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
)

// exposure chooses the targets whose per-target series a scrape shows.
// Every target a ScaledObject names adds its series, and anyone who
// reaches the gRPC port can name targets (within the triggers' quotas):
// the scrape shows at most max of them, shared between the namespaces
// that hold them one at a time in turn, so a namespace with few targets
// shows all of them and one with many shows what the others leave. The
// operator's hygiene.targets are always shown; a target no trigger holds
// (asked of the Admin API) belongs to no namespace, and takes its turn as
// one more.
type exposure struct {
	max int
	// holders says who holds each target: the namespace of the triggers
	// naming it, and the operator's targets (trigger.Registry.Holders).
	holders func() (namespaces map[string]string, operator map[string]bool)
}

// shown is what one scrape shows: the targets chosen, in their given
// order, the groups and liveness settings they cover, and how many
// targets are left out.
type shown struct {
	snaps  []judged
	groups map[liveness.GroupRef]bool
	specs  map[reportKey]bool
	hidden int
}

// reportKey is a target as a report names it: its group and the text of
// its liveness settings.
type reportKey struct {
	group    liveness.GroupRef
	liveness string
}

// choose picks the targets of snaps to show, keeping snaps' order.
func (e exposure) choose(snaps []judged) shown {
	s := shown{groups: map[liveness.GroupRef]bool{}, specs: map[reportKey]bool{}}
	keep := make([]bool, len(snaps))
	if e.holders == nil { // no cap: every target is shown
		for i := range keep {
			keep[i] = true
		}
		return s.keep(snaps, keep)
	}
	namespaces, operator := e.holders()
	byNS := map[string][]int{}
	for i, j := range snaps {
		key := j.s.Target.Key()
		if operator[key] {
			keep[i] = true
			continue
		}
		ns := namespaces[key]
		byNS[ns] = append(byNS[ns], i)
	}
	order := slices.Sorted(func(yield func(string) bool) {
		for ns := range byNS {
			if !yield(ns) {
				return
			}
		}
	})
	left := e.max
	for round := 0; left > 0; round++ {
		took := false
		for _, ns := range order {
			if left == 0 {
				break
			}
			if round < len(byNS[ns]) {
				keep[byNS[ns][round]] = true
				left--
				took = true
			}
		}
		if !took {
			break
		}
	}
	return s.keep(snaps, keep)
}

// keep fills s with the snaps kept.
func (s shown) keep(snaps []judged, keep []bool) shown {
	for i, j := range snaps {
		if !keep[i] {
			s.hidden++
			continue
		}
		s.snaps = append(s.snaps, j)
		s.groups[j.s.Target.GroupRef] = true
		s.specs[reportKey{j.s.Target.GroupRef, j.s.Target.Spec.String()}] = true
	}
	return s
}

// figures keeps the reports of the targets shown.
func (s shown) figures(all []admin.Figure) []admin.Figure {
	return slices.DeleteFunc(all, func(f admin.Figure) bool { return !s.specs[reportKey{f.Group, f.Liveness}] })
}

// hygieneSeries keeps the hygiene series of the groups shown.
func (s shown) hygieneSeries(all []hygiene.GroupSeries) []hygiene.GroupSeries {
	return slices.DeleteFunc(all, func(g hygiene.GroupSeries) bool { return !s.groups[g.Group] })
}
