package admin

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// ListPending pages through a group's PEL in id order. The page token is
// the last id of the page before, exclusive, so entries acknowledged or
// added between pages neither repeat nor shift the pages after.
func (s *Server) ListPending(ctx context.Context, req *pelwardenv1.ListPendingRequest) (*pelwardenv1.ListPendingResponse, error) {
	q, err := checkListPending(req, s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.client(q.group)
	if err != nil {
		return nil, err
	}
	// One entry more than the page says whether another page follows.
	page, err := redisx.PendingPage(ctx, c, q.group.Stream, q.group.Group, q.consumer, q.minIdle, q.after, q.size+1)
	if err != nil {
		return nil, redisStatus(err, q.group)
	}
	out := &pelwardenv1.ListPendingResponse{}
	if int64(len(page)) > q.size {
		page = page[:q.size]
		out.NextPageToken = pageToken(page[len(page)-1].ID)
	}
	out.Entries = make([]*pelwardenv1.PendingEntry, len(page))
	for i, p := range page {
		out.Entries[i] = &pelwardenv1.PendingEntry{Id: p.ID, Consumer: p.Consumer, IdleMs: p.Idle.Milliseconds(), Deliveries: p.RetryCount}
	}
	return out, nil
}

// Plan says what one hygiene scan would do to the group now, consumer by
// consumer, and changes nothing. It pages through each reclaimable PEL to
// count the entries, however many there are.
func (s *Server) Plan(ctx context.Context, req *pelwardenv1.PlanRequest) (*pelwardenv1.PlanResponse, error) {
	g, err := checkTarget(req.GetTarget(), s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.client(g)
	if err != nil {
		return nil, err
	}
	lt, snap, err := s.fresh(ctx, g)
	if err != nil {
		return nil, err
	}
	h, looked := s.settings(g)
	out := &pelwardenv1.PlanResponse{Target: s.target(liveness.Latest{Target: lt, Snapshot: snap}), Hygiene: h.Describe()}
	if !looked {
		out.Hygiene = "hygiene does not look after this group; planned as a trigger with reclaim requeue and the defaults would be: " + out.Hygiene
	}
	if snap.StreamMissing || snap.GroupMissing {
		return out, nil
	}
	now := s.opts.Now()
	claims := policy.ClaimTally{}
	for _, cv := range snap.Consumers {
		var stale policy.Stale
		if threshold, ok := policy.ReclaimThreshold(cv, h, now); ok && cv.Pending > 0 {
			if stale, err = s.countStale(ctx, c, g, cv.Name, threshold, h.MaxDeliveries); err != nil {
				return nil, redisStatus(err, g)
			}
		}
		step := policy.PlanStep(cv, snap.Consumers, h, now, stale, claims)
		out.Steps = append(out.Steps, &pelwardenv1.PlanStep{
			Consumer: cv.Name, Verdict: verdict(cv.Verdict), Action: step.Action, Entries: step.Entries,
			DeadLetterEntries: step.DeadLetter, ClaimTo: step.ClaimTo, Reason: step.Reason,
		})
	}
	return out, nil
}

// countStale counts a consumer's entries idle at least threshold, and
// those of them at maxDeliveries, by paging its PEL to the end.
func (s *Server) countStale(ctx context.Context, c *redis.Client, g events.Group, consumer string, threshold time.Duration, maxDeliveries int64) (policy.Stale, error) {
	var st policy.Stale
	err := redisx.EachPendingPage(ctx, c, g.Stream, g.Group, consumer, threshold, s.opts.BatchSize, func(page []redis.XPendingExt) error {
		for _, p := range page {
			st.Entries++
			if policy.ShouldDeadLetter(p.RetryCount, maxDeliveries) {
				st.AtMaxDeliveries++
			}
		}
		return nil
	})
	return st, err
}
