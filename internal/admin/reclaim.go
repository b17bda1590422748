package admin

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Reclaim gives entries back through the engine: every entry of one
// consumer past its threshold, or named entries, each checked in the
// script to be pending, owned as expected and idle enough. An owner the
// loop would not take from is refused unless force is set. A dry run
// needs no credential, so it takes a slot among Plan's, whose work it
// does.
func (s *Server) Reclaim(ctx context.Context, req *pelwardenv1.ReclaimRequest) (*pelwardenv1.ReclaimResponse, error) {
	q, err := checkReclaim(req, s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	if req.GetDryRun() {
		release, err := s.heavyCall("Reclaim")
		if err != nil {
			return nil, err
		}
		defer release()
	}
	job, snap, err := s.reclaimJob(ctx, q, req.GetForce(), req.GetDryRun())
	if err != nil {
		return nil, err
	}
	decide := func(owner string) (reclaim.Step, error) {
		return reclaim.DecideOperator(snap, owner, job.Hygiene, s.opts.Now(), req.GetForce(), q.mode == policy.ReclaimClaim)
	}
	out := &pelwardenv1.ReclaimResponse{Counts: map[string]int64{}, DryRun: job.DryRun}
	if q.consumer != "" {
		st, err := decide(q.consumer)
		if err != nil {
			return nil, rpcstatus.Of(err, q.group)
		}
		res, err := s.opts.Engine.Run(ctx, job, st)
		if err != nil {
			return nil, rpcstatus.Of(err, q.group)
		}
		addCounts(out.Counts, res.Counts)
		if res.Taken() == 0 {
			out.Note = nothingTaken(res, snap != nil, req.GetForce())
		}
		return out, nil
	}
	if out.Outcomes, err = s.reclaimIDs(ctx, q, job, decide); err != nil {
		return nil, err
	}
	for _, o := range out.Outcomes {
		out.Counts[o.GetOutcome()]++
	}
	return out, nil
}

// reclaimJob is the engine job of a checked Reclaim, with the group's
// fresh snapshot when the view knows it (nil otherwise, force only).
func (s *Server) reclaimJob(ctx context.Context, q reclaimRequest, force, dryRun bool) (reclaim.Job, *liveness.Snapshot, error) {
	c, err := s.client(q.group)
	if err != nil {
		return reclaim.Job{}, nil, err
	}
	h, _ := s.settings(q.group)
	h.Mode = q.mode
	job := reclaim.Job{Client: c, Target: liveness.Target{GroupRef: q.group}, Hygiene: h, Source: events.SourceAdmin, Call: "Reclaim", DryRun: dryRun}
	// Without force the owner's verdict decides, so the view must know the
	// group; force needs no verdict, but uses one where there is one.
	if _, registered := s.registered(q.group); !registered {
		if !force {
			return job, nil, status.Errorf(codes.NotFound, "%s; or pass force to take entries idle at least entryStaleSeconds (%s) without a verdict",
				status.Convert(notRegistered(q.group)).Message(), h.EntryStale)
		}
		return job, nil, nil
	}
	lt, snap, err := s.fresh(ctx, q.group)
	if err != nil {
		return job, nil, err
	}
	if snap.StreamMissing || snap.GroupMissing {
		return job, nil, rpcstatus.GroupMissing(q.group)
	}
	job.Target = lt
	return job, snap, nil
}

// reclaimIDs acts on named entries. Entries are grouped by the owner they
// must have (the request's, or each one's current owner), and every
// owner's step is decided before anything is touched.
func (s *Server) reclaimIDs(ctx context.Context, q reclaimRequest, job reclaim.Job, decide func(string) (reclaim.Step, error)) ([]*pelwardenv1.EntryOutcome, error) {
	entries, err := redisx.PendingEntries(ctx, job.Client, q.group.Stream, q.group.Group, q.ids)
	if err != nil {
		return nil, rpcstatus.Of(err, q.group)
	}
	outcomes := make([]*pelwardenv1.EntryOutcome, len(q.ids))
	owners, positions := byOwner(q, entries, outcomes)
	steps := make([]reclaim.Step, len(owners))
	for i, owner := range owners {
		if steps[i], err = decide(owner); err != nil {
			return nil, rpcstatus.Of(err, q.group)
		}
	}
	for i, st := range steps {
		pos := positions[owners[i]]
		ownerJob := job
		ownerJob.IDs = make([]string, len(pos))
		for j, p := range pos {
			ownerJob.IDs[j] = q.ids[p]
		}
		res, err := s.opts.Engine.Run(ctx, ownerJob, st)
		if err != nil {
			return nil, rpcstatus.Of(err, q.group)
		}
		for j, o := range res.Outcomes {
			if j < len(pos) {
				outcomes[pos[j]] = entryOutcome(o, st)
			}
		}
	}
	for i, o := range outcomes {
		if o == nil { // the script answers every id; said loudly if not
			outcomes[i] = &pelwardenv1.EntryOutcome{Id: q.ids[i], Outcome: string(redisx.Failed), Detail: "the script reported no outcome for this entry"}
		}
	}
	return outcomes, nil
}

// byOwner groups the ids' positions by the owner each must have, in the
// order owners first appear. Without a named owner an entry that is not
// pending has no owner: its outcome is set at once.
func byOwner(q reclaimRequest, entries []*redisx.PendingEntry, outcomes []*pelwardenv1.EntryOutcome) ([]string, map[string][]int) {
	var owners []string
	positions := map[string][]int{}
	for i, id := range q.ids {
		owner := q.idsOwner
		if owner == "" {
			if entries[i] == nil {
				outcomes[i] = entryOutcome(redisx.EntryOutcome{ID: id, Outcome: redisx.NotPending}, reclaim.Step{})
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

// entryOutcome renders one entry's outcome; detail is the copy's id, the
// new owner or the dead-letter record, or why it was skipped.
func entryOutcome(o redisx.EntryOutcome, st reclaim.Step) *pelwardenv1.EntryOutcome {
	detail := o.Detail
	switch o.Outcome {
	case redisx.Tombstoned:
		detail = "the stream entry was deleted; its PEL id was acknowledged"
	case redisx.NotPending:
		detail = "not pending: acknowledged already, or never delivered to the group"
	case redisx.OwnerChanged:
		detail = fmt.Sprintf("no longer owned by %q", st.Owner.Name)
	case redisx.NotIdle:
		detail = fmt.Sprintf("idle less than %s", st.MinIdle)
	case redisx.DuplicateID:
		detail = "named more than once; acted on once"
	case redisx.FieldCollision:
		detail = fmt.Sprintf("the entry holds its own field %q, which pelwarden would write over; left pending, untouched", o.Detail)
	case redisx.Requeued, redisx.DeadLettered:
		if detail == "" {
			detail = "dry run: nothing written"
		}
	}
	return &pelwardenv1.EntryOutcome{Id: o.ID, Outcome: string(o.Outcome), Detail: detail}
}

// nothingTaken says why a consumer's Reclaim took no entry: paging
// stopped, the consumer holds none, or none is idle long enough.
func nothingTaken(res reclaim.StepResult, judged, force bool) string {
	st := res.Step
	threshold := "the threshold its verdict sets"
	if force {
		threshold = "entryStaleSeconds, as force asks"
	}
	switch {
	case res.Stopped != "":
		return res.Stopped
	case judged && st.Owner.Pending == 0:
		return fmt.Sprintf("consumer %q holds no pending entries", st.Owner.Name)
	default:
		return fmt.Sprintf("no pending entry of consumer %q has been idle at least %s (%s); younger entries are left with it", st.Owner.Name, st.MinIdle, threshold)
	}
}

func addCounts(into map[string]int64, counts map[redisx.Outcome]int64) {
	for o, n := range counts {
		into[string(o)] += n
	}
}
