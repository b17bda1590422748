package trigger

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Run forgets expired triggers and retries the hygiene of triggers a full
// quota refused, every eighth of the expiry, until ctx ends.
func (g *Registry) Run(ctx context.Context) {
	tick := time.NewTicker(max(g.opts.Expiry/8, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			g.Sweep()
		}
	}
}

// Sweep forgets the triggers no request has named for the expiry; a group
// they were members of is merged again without them at once. A trigger
// whose hygiene a quota refused is tried again, as room may have freed.
func (g *Registry) Sweep() {
	now := g.opts.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, e := range g.entries {
		if now.Sub(e.lastSeen) <= g.opts.Expiry {
			continue
		}
		sp := g.spaces[id.Namespace]
		g.leave(e, sp, now)
		delete(g.entries, id)
		g.caps.triggers.give(id.Namespace, sp.triggers)
		sp.triggers--
		if sp.targets[e.key]--; sp.targets[e.key] == 0 {
			g.caps.targets.give(id.Namespace, len(sp.targets))
			delete(sp.targets, e.key)
		}
		if sp.triggers == 0 {
			delete(g.spaces, id.Namespace)
		}
	}
	for _, e := range g.entries {
		if e.refusal != nil && e.refusal.Code == codes.ResourceExhausted {
			g.enroll(e, g.spaces[e.id.Namespace], now, true)
		}
	}
}

// GroupView is what DescribeTarget and Plan show of a group's settings.
type GroupView struct {
	// Sources names where each setting came from.
	Sources []Setting
	// Conflict says why the group is scanned as a dry run, if it is.
	Conflict string
	// Triggers names the admitted triggers, Refused the refused ones.
	Triggers []string
	Refused  []RefusedTrigger
}

// RefusedTrigger is a trigger whose hygiene request was refused.
type RefusedTrigger struct {
	From    string
	Refusal Refusal
}

// Describe returns where a group's settings come from and which triggers
// were refused; false when no trigger or configuration entry names it.
func (g *Registry) Describe(ref liveness.GroupRef) (GroupView, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var v GroupView
	grp, ok := g.groups[ref]
	if ok {
		eff := grp.merged()
		v.Sources, v.Conflict = eff.Sources, eff.Conflict
		for _, e := range grp.members {
			v.Triggers = append(v.Triggers, e.id.from())
		}
	}
	for _, e := range g.entries {
		if e.refusal != nil && e.req.Target.GroupRef == ref {
			v.Refused = append(v.Refused, RefusedTrigger{From: e.id.from(), Refusal: *e.refusal})
		}
	}
	slices.Sort(v.Triggers)
	slices.SortFunc(v.Refused, func(a, b RefusedTrigger) int { return strings.Compare(a.From, b.From) })
	return v, ok || len(v.Refused) > 0
}
