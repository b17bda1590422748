// Package admin serves pelwarden's diagnostics API, pelwarden.v1.Admin,
// from the same liveness view the scaler uses.
package admin

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Server implements pelwardenv1.AdminServer.
type Server struct {
	pelwardenv1.UnimplementedAdminServer
	view *liveness.View
	now  func() time.Time
}

// New returns an Admin server over view.
func New(view *liveness.View, now func() time.Time) *Server {
	return &Server{view: view, now: now}
}

// ListTargets returns every registered target with its latest snapshot.
func (s *Server) ListTargets(context.Context, *pelwardenv1.ListTargetsRequest) (*pelwardenv1.ListTargetsResponse, error) {
	latest := s.view.Latest()
	slices.SortFunc(latest, func(a, b liveness.Latest) int {
		return cmp.Or(cmp.Compare(a.Target.Conn, b.Target.Conn), cmp.Compare(a.Target.Stream, b.Target.Stream),
			cmp.Compare(a.Target.Group, b.Target.Group), cmp.Compare(a.Target.Spec.String(), b.Target.Spec.String()))
	})
	out := &pelwardenv1.ListTargetsResponse{Targets: make([]*pelwardenv1.Target, 0, len(latest))}
	for _, l := range latest {
		out.Targets = append(out.Targets, s.target(l))
	}
	return out, nil
}

func (s *Server) target(l liveness.Latest) *pelwardenv1.Target {
	t := &pelwardenv1.Target{Redis: l.Target.Conn, Stream: l.Target.Stream, Group: l.Target.Group, Liveness: l.Target.Spec.String()}
	if l.Err != nil {
		t.Error = l.Err.Error()
	}
	snap := l.Snapshot
	if snap == nil {
		return t
	}
	t.SnapshotAgeMs = s.now().Sub(snap.At).Milliseconds()
	t.StreamMissing, t.GroupMissing = snap.StreamMissing, snap.GroupMissing
	t.LivePending, t.GhostPending, t.UnknownPending = snap.LivePending, snap.GhostPending, snap.UnknownPending
	t.Lag, t.LagEstimated = snap.Lag, snap.LagEstimated
	for _, c := range snap.Consumers {
		pc := &pelwardenv1.Consumer{
			Name: c.Name, Owner: c.Owner, Verdict: verdict(c.Verdict), Pending: c.Pending,
			IdleMs: c.Idle.Milliseconds(), InactiveMs: -1,
		}
		if c.Inactive >= 0 {
			pc.InactiveMs = c.Inactive.Milliseconds()
		}
		for _, r := range c.Reasons {
			pc.Reasons = append(pc.Reasons, r.String())
		}
		t.Consumers = append(t.Consumers, pc)
	}
	return t
}

func verdict(v liveness.Verdict) pelwardenv1.Verdict {
	switch v {
	case liveness.Alive:
		return pelwardenv1.Verdict_VERDICT_ALIVE
	case liveness.Ghost:
		return pelwardenv1.Verdict_VERDICT_GHOST
	default:
		return pelwardenv1.Verdict_VERDICT_UNKNOWN
	}
}
