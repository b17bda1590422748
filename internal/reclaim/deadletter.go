package reclaim

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// FinishDeadLetter is the step that finishes the two-step dead-letter
// path for what the holding consumer holds: entries a crash or a failed
// write left between the steps. Decide gives it to the holder alone.
const FinishDeadLetter Action = "finish-dead-letter"

// twoStep reports whether dead-lettering on job takes the two-step path:
// under Redis Cluster when the dead-letter stream hashes to another slot
// than the stream (one script may not touch both), or when the engine is
// told to. Everywhere else one script writes the record and acknowledges
// the entry, which is atomic and cheaper.
func (e *Engine) twoStep(job Job) bool {
	h := job.Hygiene
	if h.MaxDeliveries < 1 || h.DeadLetterStream == "" {
		return false
	}
	if e.opts.TwoStepDeadLetter {
		return true
	}
	_, cluster := job.Client.(*redis.ClusterClient)
	return cluster && !redisx.SameSlot(job.Target.Stream, h.DeadLetterStream)
}

// decideHolder is the step for pelwarden's own holding consumer: finish
// what it holds, never judge or delete it.
func decideHolder(st Step, h policy.Hygiene) Step {
	owner := st.Owner
	switch {
	case owner.Pending == 0:
		st.Reason = "pelwarden's dead-letter holder; it holds nothing"
	case h.Mode == policy.ReclaimOff:
		st.Reason = fmt.Sprintf("pelwarden's dead-letter holder with %d entries on their way to the dead-letter stream; reclaim is off, so they wait", owner.Pending)
	case h.MaxDeliveries < 1 || h.DeadLetterStream == "":
		st.Reason = fmt.Sprintf("pelwarden's dead-letter holder with %d entries, but no dead-letter stream is configured now: they wait for one, or an operator", owner.Pending)
	default:
		st.Action = FinishDeadLetter
		st.Reason = fmt.Sprintf("pelwarden's dead-letter holder: its %d entries' records are written to %s (once) and they are acknowledged", owner.Pending, h.DeadLetterStream)
	}
	return st
}

// held is the ids a batch moved to the holder.
func held(r redisx.Result) []string {
	var ids []string
	for _, o := range r.Outcomes {
		if o.Outcome == redisx.DeadLetterHeld {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

// finishHeld runs steps 2 and 3 for the entries a batch just held. A dry
// run held nothing, so it predicts them dead-lettered: step 2 and 3 have
// no guard a dry step 1 could not foresee other than a full look-back.
func (e *Engine) finishHeld(ctx context.Context, job Job, st Step, r redisx.Result, res *StepResult) error {
	ids := held(r)
	if len(ids) == 0 {
		return nil
	}
	if job.DryRun {
		res.add(redisx.DeadLettered, int64(len(ids)))
		e.countDryRun(job, redisx.DeadLettered, int64(len(ids)))
		return nil
	}
	fin, err := redisx.FinishHeld(ctx, job.Client, e.heldBatch(job, st.Owner.Name, ids, ""))
	if fin.Counts != nil {
		e.record(job, st, fin, res, "")
	}
	return e.behind(job, e.refused(ctx, job, fin, err))
}

// finishAll pages through the holder's PEL, finishing every entry.
func (e *Engine) finishAll(ctx context.Context, job Job, st Step, res *StepResult) error {
	after := ""
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Who held these before the holder is not known: the hold step
		// keeps no note of it, so their records name no consumer.
		fin, err := redisx.FinishHeld(ctx, job.Client, e.heldBatch(job, "", nil, after))
		if fin.Counts != nil {
			e.record(job, st, fin, res, after)
		}
		if err := e.refused(ctx, job, fin, err); err != nil {
			return e.behind(job, err)
		}
		if fin.Total() < e.opts.BatchSize {
			return nil
		}
		after = fin.Last
	}
}

// heldBatch is steps 2 and 3 for the holder's entries; from is the
// consumer they were taken from, "" when not known.
func (e *Engine) heldBatch(job Job, from string, ids []string, after string) redisx.Held {
	h := job.Hygiene
	return redisx.Held{
		Stream: job.Target.Stream, Group: job.Target.Group, Holder: liveness.DeadLetterHolder, Consumer: from,
		DeadLetterStream: h.DeadLetterStream, CarryField: h.DeliveryCountField, DeleteOriginal: h.DeleteOriginal,
		DryRun: job.DryRun, Wait: e.durability(job), IDs: ids, After: after, Count: e.opts.BatchSize,
	}
}
