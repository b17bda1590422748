package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Options configures an Engine.
type Options struct {
	// View is where a step's owner is judged again at each page.
	View *liveness.View
	// Events receives one event per outcome that acted or failed, per
	// batch; nil publishes nothing.
	Events *events.Bus
	// BatchSize is the entries per script call.
	BatchSize int64
	Now       func() time.Time
	Log       *slog.Logger
	// TwoStepDeadLetter takes the two-step dead-letter path everywhere,
	// not only where Redis Cluster requires it.
	TwoStepDeadLetter bool
	// Durability is the WAIT a connection asks for after each guarded
	// write, by connection name; nil asks for none.
	Durability func(conn string) redisx.Durability
	// Writes says whether a node refuses writes; nil: none is known to.
	Writes Writes
	// Servers says which stream commands the master serving a stream
	// knows, and hears when XACKDEL was refused there (redisx.Conns); nil
	// asks the server before each step and uses XACK and XDEL.
	Servers Servers
}

// Servers knows the stream commands of the servers behind connections.
type Servers interface {
	Capabilities(ctx context.Context, conn, stream string) (redisx.Capabilities, error)
	WithoutAckDel(ctx context.Context, conn, stream string)
}

func (o Options) validate() error {
	switch {
	case o.View == nil:
		return errors.New("reclaim: View is required")
	case o.BatchSize < 1:
		return fmt.Errorf("reclaim: BatchSize must be at least 1, got %d", o.BatchSize)
	}
	return nil
}

// Engine executes steps. It is safe for concurrent use.
type Engine struct {
	opts    Options
	metrics *metrics
	moves   moves
}

// New returns an Engine whose metrics are registered on reg.
func New(opts Options, reg prometheus.Registerer) (*Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Engine{opts: opts, metrics: newMetrics(reg)}, nil
}

// Job is how a caller asks for steps to be executed on one group.
type Job struct {
	Client redis.UniversalClient
	// Target is the group, with the liveness rule its view is read by; a
	// target the view does not know keeps each step's first threshold.
	Target  liveness.Target
	Hygiene policy.Hygiene
	Source  events.Source
	// Call names the operator call in events ("Reclaim", "Deregister").
	Call string
	// DryRun runs the same scripts with their writes off, and publishes
	// nothing.
	DryRun bool
	// IDs are the entries a reclaim step acts on, each guarded on its own;
	// without, the step pages through the owner's PEL to its end.
	IDs []string
}

// StepResult is what executing one step did, or in a dry run would do.
type StepResult struct {
	Step   Step
	Counts map[redisx.Outcome]int64
	// Outcomes lists every named entry of a Job with IDs.
	Outcomes []redisx.EntryOutcome
	// Failures are the first entries left pending for an operator to fix:
	// a failed write or a field collision.
	Failures []redisx.EntryOutcome
	// Stopped says why paging ended before the owner's PEL did.
	Stopped string
}

// maxFailures bounds the failures a StepResult keeps.
const maxFailures = 10

// Taken is the entries the step gave back (requeued, claimed,
// dead-lettered or tombstoned).
func (r StepResult) Taken() int64 {
	var n int64
	for o, c := range r.Counts {
		if o.Taken() {
			n += c
		}
	}
	return n
}

func (r *StepResult) add(o redisx.Outcome, n int64) {
	if r.Counts == nil {
		r.Counts = map[redisx.Outcome]int64{}
	}
	r.Counts[o] += n
}

// Report is what executing a list of steps did.
type Report struct {
	DryRun bool
	Steps  []StepResult
}

// Counts sums the outcomes of every step.
func (r Report) Counts() map[redisx.Outcome]int64 {
	out := map[redisx.Outcome]int64{}
	for _, s := range r.Steps {
		for o, n := range s.Counts {
			out[o] += n
		}
	}
	return out
}

// RunAll executes steps in order and stops at the first error, returning
// what was done until then.
func (e *Engine) RunAll(ctx context.Context, job Job, steps []Step) (Report, error) {
	rep := Report{DryRun: job.DryRun, Steps: make([]StepResult, 0, len(steps))}
	for _, st := range steps {
		res, err := e.Run(ctx, job, st)
		rep.Steps = append(rep.Steps, res)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Run executes one step. A step that would write to a node that refuses
// writes is not run: it returns the *redisx.WritesRefused, as does a step
// whose writes Redis refused, which stops there.
func (e *Engine) Run(ctx context.Context, job Job, st Step) (StepResult, error) {
	res := StepResult{Step: st}
	if refused := e.refusing(ctx, job, st); refused != nil {
		return res, refused
	}
	var err error
	switch st.Action {
	case Requeue, Claim, Release:
		if st, err = e.capable(ctx, job, st, &res); err != nil || st.Action == None {
			break
		}
		if len(job.IDs) > 0 {
			err = e.named(ctx, job, st, &res)
		} else {
			err = e.paged(ctx, job, st, &res)
		}
	case DeleteConsumer:
		err = e.delete(ctx, job, st, &res)
	case FinishDeadLetter:
		err = e.finishAll(ctx, job, st, &res)
	default:
		if st.Skip != "" && st.Owner.Pending > 0 {
			res.add(st.Skip, st.Owner.Pending)
			if !job.DryRun {
				e.metrics.skipped.WithLabelValues(job.Target.Labels(string(st.Skip))...).Add(float64(st.Owner.Pending))
			}
		}
	}
	if err != nil && !job.DryRun && !redisx.IsWritesRefused(err) {
		e.metrics.errors.WithLabelValues(job.Target.Labels()...).Inc()
	}
	return res, err
}

// paged takes the owner's entries past the step's threshold, batch by
// batch, to the end of its PEL: a PEL has no ceiling, so neither has this.
// The owner is judged again before each batch, at the batch's own time:
// an owner that came back is left alone, and a threshold taken from a
// pod's going never reaches entries delivered after it went.
func (e *Engine) paged(ctx context.Context, job Job, st Step, res *StepResult) error {
	after := ""
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		minIdle, ok := e.threshold(ctx, job, st)
		if !ok {
			res.Stopped = fmt.Sprintf("%q is no longer reclaimable", st.Owner.Name)
			e.opts.Log.Info("owner no longer reclaimable; stopping", "target", job.Target.String(), "consumer", st.Owner.Name, "after", after)
			return nil
		}
		st.MinIdle = minIdle
		r, err := redisx.RunReclaim(ctx, job.Client, e.batch(job, st, nil, after))
		e.record(job, st, r, res, after)
		if r.AckDelRefused {
			st.ackDel = false
			e.ackDelRefused(ctx, job, r)
		}
		if err := e.refused(ctx, job, r, err); err != nil {
			return e.behind(job, err)
		}
		if err := e.finishHeld(ctx, job, st, r, res); err != nil {
			return err
		}
		if r.Total() < e.opts.BatchSize {
			return nil
		}
		after = r.Last
	}
}

// named acts on the job's entries, in batches, each entry guarded to be
// pending, owned by the step's owner and idle at least its threshold.
func (e *Engine) named(ctx context.Context, job Job, st Step, res *StepResult) error {
	for start := 0; start < len(job.IDs); start += int(e.opts.BatchSize) {
		ids := job.IDs[start:min(len(job.IDs), start+int(e.opts.BatchSize))]
		r, err := redisx.RunReclaim(ctx, job.Client, e.batch(job, st, ids, ""))
		e.record(job, st, r, res, "")
		if r.AckDelRefused {
			st.ackDel = false
			e.ackDelRefused(ctx, job, r)
		}
		res.Outcomes = append(res.Outcomes, r.Outcomes...)
		if err := e.refused(ctx, job, r, err); err != nil {
			return e.behind(job, err)
		}
		if err := e.finishHeld(ctx, job, st, r, res); err != nil {
			return err
		}
	}
	return nil
}

// threshold is the step's threshold now, from a read of the owner begun
// within the view's freshness (the view reads the group no more than that
// often while a long step pages); false when the owner is no longer
// reclaimable. A read that fails leaves the view's latest to judge by:
// the batch it would guard fails the same way.
func (e *Engine) threshold(ctx context.Context, job Job, st Step) (time.Duration, bool) {
	if st.rule == ruleFixed {
		return st.MinIdle, true
	}
	owner, seen := st.Owner, st.seen
	snap, ok, err := e.opts.View.Recent(ctx, job.Target)
	if err != nil {
		snap, ok = e.opts.View.Peek(job.Target)
	}
	if ok {
		// A name gone from the group's consumer list keeps its last view:
		// nothing alive holds it.
		for _, c := range snap.Consumers {
			if c.Name == owner.Name {
				owner, seen = c, true
				break
			}
		}
	}
	now := e.opts.Now()
	if st.rule == ruleOperator {
		t, refusal := policy.OperatorThreshold(owner, seen, job.Hygiene, now, st.force)
		return t, refusal == ""
	}
	return policy.ReclaimThreshold(owner, job.Hygiene, now)
}

func (e *Engine) batch(job Job, st Step, ids []string, after string) redisx.Reclaim {
	h := job.Hygiene
	hold := ""
	if e.twoStep(job) {
		hold = liveness.DeadLetterHolder
	}
	return redisx.Reclaim{
		Hold:   hold,
		Stream: job.Target.Stream, Group: job.Target.Group, Consumer: st.Owner.Name, ClaimTo: st.ClaimTo,
		MinIdle: st.MinIdle, CarryField: h.DeliveryCountField, MaxDeliveries: h.MaxDeliveries,
		DeadLetterStream: h.DeadLetterStream, DeleteOriginal: h.DeleteOriginal, DryRun: job.DryRun,
		Wait: e.durability(job), IDs: ids, After: after, Count: e.opts.BatchSize,
		Release: st.Action == Release, AckDel: st.ackDel,
	}
}

// delete deletes the step's consumer, guarded in the script to hold no
// entries and to have been unused for the step's threshold.
func (e *Engine) delete(ctx context.Context, job Job, st Step, res *StepResult) error {
	out, err := redisx.DeleteConsumer(ctx, job.Client, job.Target.Stream, job.Target.Group, st.Owner.Name, st.MinIdle, job.DryRun)
	if err != nil {
		return e.refused(ctx, job, redisx.Result{}, err)
	}
	res.add(out, 1)
	log := e.opts.Log.With("target", job.Target.String(), "consumer", st.Owner.Name)
	switch {
	case job.DryRun:
		e.countDryRun(job, out, 1)
		if out == redisx.ConsumerDeleted && job.Source == events.SourceHygiene {
			log.Info("dry run: would delete ghost consumer (PEL empty)")
		}
	case out == redisx.ConsumerDeleted:
		e.publish(job, st.Owner.Name, out, 1, "its PEL was empty")
		e.metrics.actions.WithLabelValues(job.Target.Labels(string(out))...).Inc()
		log.Info("consumer deleted: its PEL was empty", "source", job.Source, "reasons", liveness.ReasonsString(st.Owner.Reasons))
	default:
		e.metrics.skipped.WithLabelValues(job.Target.Labels(string(out))...).Inc()
	}
	return nil
}

// durability is the WAIT job's connection asks for.
func (e *Engine) durability(job Job) redisx.Durability {
	if e.opts.Durability == nil {
		return redisx.Durability{}
	}
	return e.opts.Durability(job.Target.Conn)
}

// behind counts and logs a write the replicas did not acknowledge in
// time, and passes err on: the scan stops there and the next one goes on,
// every guarded step being safe to run again.
func (e *Engine) behind(job Job, err error) error {
	var rb *redisx.ReplicasBehindError
	if errors.As(err, &rb) {
		e.metrics.replicasBehind.WithLabelValues(job.Target.Labels()...).Inc()
		e.opts.Log.Warn("replicas did not acknowledge a guarded write in time; stopping this scan", "target", job.Target.String(), "err", err)
	}
	return err
}
