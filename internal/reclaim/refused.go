package reclaim

import (
	"context"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Writes is what the engine knows of whether a node accepts writes
// (redisx.Conns): a step that would write to a node refusing them is not
// run, and a refusal a script caught is told, so that what follows waits
// instead of meeting it again entry by entry.
type Writes interface {
	WritesRefused(ctx context.Context, conn, key string) *redisx.WritesRefused
	NoteRefused(ctx context.Context, conn, key string, r liveness.Refusal)
}

// writes says whether the step would write.
func (st Step) writes() bool {
	switch st.Action {
	case Requeue, Claim, DeleteConsumer, FinishDeadLetter:
		return true
	case DeadLetter, None:
	}
	return false
}

// refusing is the refusal of writes job's stream's node answers now, nil
// when none is known or the job writes nothing.
func (e *Engine) refusing(ctx context.Context, job Job, st Step) *redisx.WritesRefused {
	if e.opts.Writes == nil || job.DryRun || !st.writes() {
		return nil
	}
	return e.opts.Writes.WritesRefused(ctx, job.Target.Conn, job.Target.Stream)
}

// refused turns a batch whose writes Redis refused (a script's caught
// error on an entry, or the call's own error) into a *WritesRefused, told
// to Writes; any other err passes through.
func (e *Engine) refused(ctx context.Context, job Job, r redisx.Result, err error) error {
	ref := redisx.RefusalOf(err)
	if ref == liveness.RefusalNone {
		ref = redisx.RefusedIn(r)
	}
	if ref == liveness.RefusalNone {
		return err
	}
	if e.opts.Writes != nil {
		e.opts.Writes.NoteRefused(ctx, job.Target.Conn, job.Target.Stream, ref)
	}
	return &redisx.WritesRefused{Conn: job.Target.Conn, Refusal: ref}
}
