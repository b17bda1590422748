package reclaim

import (
	"context"
	"fmt"
	"strings"

	"github.com/pelwarden/pelwarden/internal/redisx"
)

// deregisterRounds bounds how often Deregister drains the PEL again when
// the worker read more entries while it was being drained.
const deregisterRounds = 3

// Deregistration is what a worker's Deregister did.
type Deregistration struct {
	Requeued, DeadLettered int64
	// Deleted says the consumer existed and was deleted.
	Deleted bool
}

// Incomplete means some entries could not be given back and stay pending
// with their owner; retrying is safe.
type Incomplete struct{ Reason string }

func (i *Incomplete) Error() string { return i.Reason }

// Deregister gives back every entry of a worker's own PEL (requeued, or
// dead-lettered at maxDeliveries), each guarded to be pending and owned by
// the worker, then deletes the consumer, guarded to hold nothing. A second
// call finds nothing and deletes nothing.
func (e *Engine) Deregister(ctx context.Context, job Job, consumer string) (Deregistration, error) {
	var out Deregistration
	var failures []string
	for range deregisterRounds {
		res, err := e.Run(ctx, job, Drain(consumer))
		if err != nil {
			return out, err
		}
		out.Requeued += res.Counts[redisx.Requeued]
		out.DeadLettered += res.Counts[redisx.DeadLettered]
		for _, f := range res.Failures {
			failures = append(failures, fmt.Sprintf("%s: %s", f.ID, f.Detail))
		}
		del, err := e.Run(ctx, job, Delete(consumer, 0))
		if err != nil {
			return out, err
		}
		switch {
		case del.Counts[redisx.ConsumerDeleted] > 0:
			out.Deleted = true
			e.publish(job, consumer, redisx.Deregistered, out.Requeued+out.DeadLettered, "consumer deleted")
			return out, nil
		case del.Counts[redisx.DeleteHasPending] == 0: // gone: a repeated call
			return out, nil
		case res.Counts[redisx.Failed] > 0:
			return out, &Incomplete{Reason: fmt.Sprintf("%d entries of %q could not be requeued and stay pending (%s); the consumer was kept: retry Deregister",
				res.Counts[redisx.Failed], consumer, strings.Join(failures[:min(3, len(failures))], "; "))}
		case res.Counts[redisx.FieldCollision] > 0:
			return out, &Incomplete{Reason: fmt.Sprintf("%d entries of %q hold a field pelwarden would write over and stay pending untouched (%s); "+
				"the consumer was kept: change deliveryCountField, or process those entries, then retry Deregister",
				res.Counts[redisx.FieldCollision], consumer, strings.Join(failures[:min(3, len(failures))], "; "))}
		}
		// The worker read more entries while it was drained: drain again.
	}
	return out, &Refused{Reason: fmt.Sprintf("consumer %q kept reading entries while it deregistered; "+
		"stop reading (XREADGROUP) before calling Deregister. %d entries were requeued and %d dead-lettered so far", consumer, out.Requeued, out.DeadLettered)}
}
