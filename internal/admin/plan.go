package admin

import (
	"context"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// ListPending pages through a group's PEL in id order. The page token is
// the last id of the page before, exclusive, so entries acknowledged or
// added between pages neither repeat nor shift the pages after. A page
// costs Redis up to a whole PEL's scan (XPENDING with IDLE skips the
// entries not idle enough), so it takes a slot among Plan's and
// Findings'.
func (s *Server) ListPending(ctx context.Context, req *pelwardenv1.ListPendingRequest) (*pelwardenv1.ListPendingResponse, error) {
	q, err := checkListPending(req, s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.diagnosticsClient(q.group)
	if err != nil {
		return nil, err
	}
	release, err := s.heavyCall("ListPending")
	if err != nil {
		return nil, err
	}
	defer release()
	// One entry more than the page says whether another page follows.
	page, err := redisx.PendingPage(ctx, c, q.group.Stream, q.group.Group, q.consumer, q.minIdle, q.after, q.size+1)
	if err != nil {
		return nil, rpcstatus.Of(err, q.group)
	}
	out := &pelwardenv1.ListPendingResponse{}
	if int64(len(page)) > q.size {
		page = page[:q.size]
		out.NextPageToken = pageToken(page[len(page)-1].ID)
	}
	out.Entries = make([]*pelwardenv1.PendingEntry, len(page))
	for i, p := range page {
		out.Entries[i] = &pelwardenv1.PendingEntry{Id: p.ID, Consumer: p.Consumer, IdleMs: p.Idle.Milliseconds(), Deliveries: p.Deliveries}
	}
	return out, nil
}

// Plan says what one hygiene scan would do to the group now, consumer by
// consumer, and changes nothing: the engine decides the scan's steps and
// runs them dry, through the same scripts with their writes off, paging
// each reclaimable PEL to its end.
func (s *Server) Plan(ctx context.Context, req *pelwardenv1.PlanRequest) (*pelwardenv1.PlanResponse, error) {
	g, err := checkTarget(req.GetTarget(), s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.client(g)
	if err != nil {
		return nil, err
	}
	release, err := s.heavyCall("Plan")
	if err != nil {
		return nil, err
	}
	defer release()
	lt, snap, err := s.fresh(ctx, g)
	if err != nil {
		return nil, err
	}
	h, looked := s.settings(g)
	out := &pelwardenv1.PlanResponse{Target: s.target(liveness.Latest{Target: lt, Snapshot: snap}), Hygiene: h.Describe()}
	if v, ok := s.provenance(g); ok && looked {
		out.HygieneSources = settingSources(v)
	}
	if !looked {
		out.Hygiene = "hygiene does not look after this group; planned as a trigger with reclaim requeue and the defaults would be: " + out.Hygiene
	}
	steps := reclaim.Decide(snap, h, s.opts.Now())
	job := reclaim.Job{Client: c, Target: lt, Hygiene: h, Source: events.SourceAdmin, DryRun: true}
	rep, err := s.opts.Engine.RunAll(ctx, job, steps)
	if err != nil {
		return nil, rpcstatus.Of(err, g)
	}
	for _, res := range rep.Steps {
		x := reclaim.Explain(res, h)
		out.Steps = append(out.Steps, &pelwardenv1.PlanStep{
			Consumer: res.Step.Owner.Name, Verdict: verdict(res.Step.Owner.Verdict), Action: string(x.Action), Entries: x.Entries,
			DeadLetterEntries: x.DeadLetter, TombstoneEntries: x.Tombstones, ClaimTo: x.ClaimTo, Reason: x.Reason,
		})
	}
	return out, nil
}
