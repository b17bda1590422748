package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// batch is what an operator's reclaim takes from one owner.
type batch struct {
	owner   string
	minIdle time.Duration
	claimTo string
}

// reclaimCall is one checked Reclaim with everything it acts by.
type reclaimCall struct {
	reclaim
	c      *redis.Client
	h      policy.Hygiene
	snap   *liveness.Snapshot
	force  bool
	dryRun bool
}

// Reclaim gives entries back through the loop's guarded scripts: every
// entry of one consumer past its threshold, or named entries, each checked
// in the script to be pending, owned as expected and idle enough. An owner
// the loop would not take from is refused unless force is set.
func (s *Server) Reclaim(ctx context.Context, req *pelwardenv1.ReclaimRequest) (*pelwardenv1.ReclaimResponse, error) {
	q, err := checkReclaim(req, s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	call := reclaimCall{reclaim: q, force: req.GetForce(), dryRun: req.GetDryRun()}
	if call.c, err = s.client(q.group); err != nil {
		return nil, err
	}
	call.h, _ = s.settings(q.group)
	call.h.Mode = policy.ReclaimMode(q.mode)
	// Without force the owner's verdict decides, so the view must know the
	// group; force needs no verdict, but uses one where there is one.
	_, registered := s.registered(q.group)
	if !registered && !call.force {
		return nil, status.Errorf(codes.NotFound, "%s; or pass force to take entries idle at least entryStaleSeconds (%s) without a verdict",
			status.Convert(notRegistered(q.group)).Message(), call.h.EntryStale)
	}
	if registered {
		if _, call.snap, err = s.fresh(ctx, q.group); err != nil {
			return nil, err
		}
		if call.snap.StreamMissing || call.snap.GroupMissing {
			return nil, groupMissing(q.group)
		}
	}
	if q.consumer != "" {
		return s.reclaimConsumer(ctx, call)
	}
	return s.reclaimIDs(ctx, call)
}

// batchFor decides the threshold and claim target for one owner, or
// refuses with the reason.
func (s *Server) batchFor(call reclaimCall, owner string) (batch, error) {
	cv, seen := liveness.ConsumerView{Name: owner}, false
	var consumers []liveness.ConsumerView
	if call.snap != nil {
		consumers = call.snap.Consumers
		for _, c := range consumers {
			if c.Name == owner {
				cv, seen = c, true
			}
		}
	}
	threshold, refusal := policy.OperatorThreshold(cv, seen, call.h, s.opts.Now(), call.force)
	if refusal != "" {
		return batch{}, status.Error(codes.FailedPrecondition, refusal)
	}
	b := batch{owner: owner, minIdle: threshold}
	if call.mode == redisx.ModeClaim {
		to, ok := policy.PickReclaimTarget(consumers, owner, nil)
		if !ok {
			return batch{}, status.Errorf(codes.FailedPrecondition, "mode claim: no consumer of the group other than %q is Alive to take the entries; use mode requeue", owner)
		}
		b.claimTo = to
	}
	return b, nil
}

// pageThreshold is the owner's threshold now, from the view's latest read
// of the target when there is one, else from the call's; false when the
// owner is no longer reclaimable.
func (s *Server) pageThreshold(call reclaimCall, owner string) (time.Duration, bool) {
	if call.snap != nil {
		if snap, ok := s.opts.View.Peek(call.snap.Target); ok {
			call.snap = snap
		}
	}
	b, err := s.batchFor(call, owner)
	return b.minIdle, err == nil
}

func (s *Server) reclaimConsumer(ctx context.Context, call reclaimCall) (*pelwardenv1.ReclaimResponse, error) {
	b, err := s.batchFor(call, call.consumer)
	if err != nil {
		return nil, err
	}
	out := &pelwardenv1.ReclaimResponse{Counts: map[string]int64{}, DryRun: call.dryRun}
	g := call.group
	if call.dryRun {
		err := redisx.EachPendingPage(ctx, call.c, g.Stream, g.Group, b.owner, b.minIdle, s.opts.BatchSize, func(page []redis.XPendingExt) error {
			for i := range page {
				out.Counts[wouldReclaim(&page[i], b, call.h, call.mode).Outcome]++
			}
			return nil
		})
		if err != nil {
			return nil, redisStatus(err, g)
		}
		return out, nil
	}
	after := ""
	for {
		// The threshold of a ghost whose pod went grows with time; taking
		// it at each page's time keeps it from reaching entries delivered
		// after the pod went, as the hygiene loop does. An owner that is
		// no longer reclaimable ends the call with what was done.
		if after != "" {
			next, ok := s.pageThreshold(call, b.owner)
			if !ok {
				return out, nil
			}
			b.minIdle = next
		}
		res, err := redisx.RunReclaim(ctx, call.c, s.reclaimArgs(call, b, nil, after))
		if err != nil {
			return nil, redisStatus(err, g)
		}
		s.tally(g, b.owner, res.Counts, out.Counts, "Reclaim")
		if res.Total() < s.opts.BatchSize {
			return out, nil
		}
		after = res.Last
	}
}

// reclaimIDs acts on named entries. Entries are grouped by the owner they
// must have (the request's, or each one's current owner), and every owner
// is checked before anything is touched.
func (s *Server) reclaimIDs(ctx context.Context, call reclaimCall) (*pelwardenv1.ReclaimResponse, error) {
	g := call.group
	entries, err := redisx.PendingEntries(ctx, call.c, g.Stream, g.Group, call.ids)
	if err != nil {
		return nil, redisStatus(err, g)
	}
	outcomes := make([]*pelwardenv1.EntryOutcome, len(call.ids))
	owners, positions := byOwner(call, entries, outcomes)
	batches := make([]batch, len(owners))
	for i, owner := range owners {
		if batches[i], err = s.batchFor(call, owner); err != nil {
			return nil, err
		}
	}
	for _, b := range batches {
		if err := s.reclaimOwnersIDs(ctx, call, b, entries, positions[b.owner], outcomes); err != nil {
			return nil, err
		}
	}
	out := &pelwardenv1.ReclaimResponse{Counts: map[string]int64{}, Outcomes: outcomes, DryRun: call.dryRun}
	for i, o := range outcomes {
		if o == nil { // the script answers every id; said loudly if not
			outcomes[i] = &pelwardenv1.EntryOutcome{Id: call.ids[i], Outcome: redisx.Failed, Detail: "the script reported no outcome for this entry"}
		}
		out.Counts[outcomes[i].GetOutcome()]++
	}
	return out, nil
}

// byOwner groups the ids' positions by the owner each must have, in the
// order owners first appear. Without a named owner an entry that is not
// pending has no owner: its outcome is set at once.
func byOwner(call reclaimCall, entries []*redis.XPendingExt, outcomes []*pelwardenv1.EntryOutcome) ([]string, map[string][]int) {
	var owners []string
	positions := map[string][]int{}
	for i, id := range call.ids {
		owner := call.idsOwner
		if owner == "" {
			if entries[i] == nil {
				outcomes[i] = skipped(id, redisx.NotPending, batch{})
				continue
			}
			owner = entries[i].Consumer
		}
		if _, ok := positions[owner]; !ok {
			owners = append(owners, owner)
		}
		positions[owner] = append(positions[owner], i)
	}
	return owners, positions
}

// reclaimOwnersIDs acts on (or, in a dry run, judges) one owner's named
// entries in one script call, and fills in their outcomes.
func (s *Server) reclaimOwnersIDs(ctx context.Context, call reclaimCall, b batch, entries []*redis.XPendingExt, pos []int, outcomes []*pelwardenv1.EntryOutcome) error {
	if call.dryRun {
		for _, i := range pos {
			o := wouldReclaim(entries[i], b, call.h, call.mode)
			o.Id = call.ids[i]
			outcomes[i] = o
		}
		return nil
	}
	ids := make([]string, len(pos))
	for j, i := range pos {
		ids[j] = call.ids[i]
	}
	res, err := redisx.RunReclaim(ctx, call.c, s.reclaimArgs(call, b, ids, ""))
	if err != nil {
		return redisStatus(err, call.group)
	}
	s.tally(call.group, b.owner, res.Counts, nil, "Reclaim")
	for j, o := range res.Outcomes {
		if j < len(pos) {
			outcomes[pos[j]] = outcome(o, b)
		}
	}
	return nil
}

func (s *Server) reclaimArgs(call reclaimCall, b batch, ids []string, after string) redisx.Reclaim {
	h := call.h
	return redisx.Reclaim{
		Stream: call.group.Stream, Group: call.group.Group, Consumer: b.owner, Mode: call.mode, ClaimTo: b.claimTo,
		MinIdle: b.minIdle, CarryField: h.DeliveryCountField, MaxDeliveries: h.MaxDeliveries,
		DeadLetterStream: h.DeadLetterStream, DeleteOriginal: h.DeleteOriginal,
		IDs: ids, After: after, Count: s.opts.BatchSize,
	}
}

// tally publishes a batch's actions as admin events and adds its counts to
// into (when set), under the names the API uses.
func (s *Server) tally(g events.Group, owner string, counts, into map[string]int64, detail string) {
	for o, n := range counts {
		if action, ok := hygiene.EventAction(o); ok && n > 0 {
			s.publish(g, owner, action, n, detail)
		}
		if into != nil {
			into[outcomeName(o)] += n
		}
	}
}

// outcomeName is the API's name of a script outcome.
func outcomeName(o string) string {
	if o == redisx.Tombstoned {
		return "tombstoned"
	}
	return o
}

// outcome renders a script's outcome for one entry; detail is the copy's
// id, the new owner or the dead-letter record, or why it was skipped.
func outcome(o redisx.Outcome, b batch) *pelwardenv1.EntryOutcome {
	switch o.Result {
	case redisx.Tombstoned:
		return &pelwardenv1.EntryOutcome{Id: o.ID, Outcome: outcomeName(o.Result), Detail: "the stream entry was deleted; its PEL id was acknowledged"}
	case redisx.Requeued, redisx.Claimed, redisx.DeadLettered, redisx.Failed:
		return &pelwardenv1.EntryOutcome{Id: o.ID, Outcome: o.Result, Detail: o.Detail}
	}
	return skipped(o.ID, o.Result, b)
}

func skipped(id, reason string, b batch) *pelwardenv1.EntryOutcome {
	detail := reason
	switch reason {
	case redisx.NotPending:
		detail = "not pending: acknowledged already, or never delivered to the group"
	case redisx.OwnerChanged:
		detail = fmt.Sprintf("no longer owned by %q", b.owner)
	case redisx.NotIdle:
		detail = fmt.Sprintf("idle less than %s", b.minIdle)
	case redisx.DuplicateID:
		detail = "named more than once; acted on once"
	}
	return &pelwardenv1.EntryOutcome{Id: id, Outcome: reason, Detail: detail}
}

// wouldReclaim is what the guarded script would do to an entry, read
// without touching it: the dry run of Reclaim. Tombstones show only when
// acted on, since finding one means reading the stream entry.
func wouldReclaim(p *redis.XPendingExt, b batch, h policy.Hygiene, mode redisx.Mode) *pelwardenv1.EntryOutcome {
	switch {
	case p == nil:
		return skipped("", redisx.NotPending, b)
	case p.Consumer != b.owner:
		return skipped(p.ID, redisx.OwnerChanged, b)
	case p.Idle < b.minIdle:
		return skipped(p.ID, redisx.NotIdle, b)
	case policy.ShouldDeadLetter(p.RetryCount, h.MaxDeliveries):
		return &pelwardenv1.EntryOutcome{Id: p.ID, Outcome: redisx.DeadLettered, Detail: "would go to " + h.DeadLetterStream}
	case mode == redisx.ModeClaim:
		return &pelwardenv1.EntryOutcome{Id: p.ID, Outcome: redisx.Claimed, Detail: b.claimTo}
	default:
		return &pelwardenv1.EntryOutcome{Id: p.ID, Outcome: redisx.Requeued, Detail: "dry run: no copy written"}
	}
}
