package app

import (
	"maps"
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
// order, the groups and liveness settings they cover, the failing
// targets chosen, and how many targets are left out.
type shown struct {
	snaps   []judged
	groups  map[liveness.GroupRef]bool
	specs   map[reportKey]bool
	failing []liveness.Target
	hidden  int
}

// reportKey is a target as a report names it: its group and the text of
// its liveness settings.
type reportKey struct {
	group    liveness.GroupRef
	liveness string
}

// choose picks the targets of snaps to show, and apart from them those of
// failing (whose reads fail: an outage fails them all, each with no
// snapshot to show it by), keeping the given orders.
func (e exposure) choose(snaps []judged, failing []liveness.Target) shown {
	s := shown{groups: map[liveness.GroupRef]bool{}, specs: map[reportKey]bool{}}
	var namespaces map[string]string
	var operator map[string]bool
	if e.holders != nil {
		namespaces, operator = e.holders()
	}
	keep := e.pick(len(snaps), func(i int) string { return snaps[i].s.Target.Key() }, namespaces, operator)
	for i, ok := range e.pick(len(failing), func(i int) string { return failing[i].Key() }, namespaces, operator) {
		if ok {
			s.failing = append(s.failing, failing[i])
		}
	}
	return s.keep(snaps, keep)
}

// pick says which of n targets, each named by its key, to show: every
// one without a cap, else the operator's and up to max of the others, the
// namespaces taking one each in turn.
func (e exposure) pick(n int, key func(int) string, namespaces map[string]string, operator map[string]bool) []bool {
	keep := make([]bool, n)
	if e.holders == nil { // no cap: every target is shown
		for i := range keep {
			keep[i] = true
		}
		return keep
	}
	byNS := map[string][]int{}
	for i := range n {
		k := key(i)
		if operator[k] {
			keep[i] = true
			continue
		}
		ns := namespaces[k]
		byNS[ns] = append(byNS[ns], i)
	}
	order := slices.Sorted(maps.Keys(byNS))
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
	return keep
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
