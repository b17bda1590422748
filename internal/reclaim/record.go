package reclaim

import (
	"strings"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// record adds one batch's result to the step's, and tells events, metrics
// and the log what it did. A dry run publishes nothing, since nothing
// happened; the loop's dry runs are counted and logged as such.
func (e *Engine) record(job Job, st Step, r redisx.Result, res *StepResult, after string) {
	for o, n := range r.Counts {
		res.add(o, n)
	}
	for _, o := range r.Outcomes {
		if o.Outcome.Stuck() && len(res.Failures) < maxFailures {
			res.Failures = append(res.Failures, o)
		}
	}
	if r.Total() == 0 {
		return
	}
	if job.DryRun {
		for o, n := range r.Counts {
			e.countDryRun(job, o, n)
		}
		if job.Source == events.SourceHygiene {
			e.opts.Log.Info("dry run: would reclaim", "target", job.Target.String(), "consumer", st.Owner.Name,
				"mode", string(st.Action), "after", after, "last", r.Last, "would", r.Counts)
		}
		return
	}
	if st.ClaimTo != "" && r.Counts[redisx.Claimed] > 0 {
		e.moves.note(job.Target.GroupRef, st.ClaimTo, e.opts.Now())
	}
	detail := string(st.Action)
	if st.ClaimTo != "" {
		detail += " to " + st.ClaimTo
	}
	if job.Call != "" {
		detail = job.Call + ": " + detail
	}
	for o, n := range r.Counts {
		if o.Acted() || o.Stuck() {
			e.publish(job, st.Owner.Name, o, n, detail)
		}
		if o.Acted() {
			e.metrics.actions.WithLabelValues(job.Target.Labels(string(o))...).Add(float64(n))
		} else {
			e.metrics.skipped.WithLabelValues(job.Target.Labels(string(o))...).Add(float64(n))
		}
	}
	e.logBatch(job, st, r, after)
}

// logBatch logs a batch once, with its counts, plus each entry that needs
// an operator's eye: a failed write, a field collision and a
// dead-lettered entry.
func (e *Engine) logBatch(job Job, st Step, r redisx.Result, after string) {
	log := e.opts.Log.With("target", job.Target.String(), "consumer", st.Owner.Name, "verdict", st.Owner.Verdict.String(), "source", job.Source)
	attrs := []any{"mode", string(st.Action), "after", after, "last", r.Last}
	if st.ClaimTo != "" {
		attrs = append(attrs, "to", st.ClaimTo)
	}
	for o, n := range r.Counts {
		attrs = append(attrs, string(o), n)
	}
	failed, refused := 0, 0
	var collided []string
	for _, o := range r.Outcomes {
		switch o.Outcome {
		case redisx.Failed:
			if o.Refused() != liveness.RefusalNone {
				refused++ // the connection reports the refusal, once
				continue
			}
			e.metrics.errors.WithLabelValues(job.Target.Labels()...).Inc()
			if failed++; failed <= 3 {
				log.Error("entry left untouched: a write failed", "id", o.ID, "err", o.Detail)
			}
		case redisx.FieldCollision:
			if len(collided) < 3 {
				collided = append(collided, o.ID+" ("+o.Detail+")")
			}
		case redisx.DeadLettered:
			attrs := []any{"id", o.ID, "deliveries", o.Deliveries, "deadLetterStream", job.Hygiene.DeadLetterStream, "record", o.Detail}
			if o.From != "" && o.From != st.Owner.Name {
				attrs = append(attrs, "from", o.From)
			}
			log.Warn("entry dead-lettered", attrs...)
		}
	}
	if failed > 3 {
		log.Error("more entries left untouched in this batch: writes failed", "more", failed-3)
	}
	// One line per batch: a collision stays until someone changes the
	// entry or deliveryCountField, so each scan meets it again.
	if n := r.Counts[redisx.FieldCollision]; n > 0 {
		log.Warn("entries left pending: they hold a field pelwarden would write over", "entries", n, "first", strings.Join(collided, ", "))
	}
	if refused > 0 && refused == len(r.Outcomes) && r.Total() == int64(refused) {
		return // nothing was done: Redis refused every write
	}
	log.Info("reclaimed", attrs...)
}

// publish tells watchers what was done: actions and failures, not the
// entries the guard skipped, and nothing in a dry run.
func (e *Engine) publish(job Job, consumer string, o redisx.Outcome, n int64, detail string) {
	if n == 0 || job.DryRun {
		return
	}
	e.opts.Events.Publish(events.Event{
		Time: e.opts.Now(), Group: job.Target.GroupRef, Consumer: consumer,
		Action: o, Entries: n, Source: job.Source, Detail: detail,
	})
}

// countDryRun counts what the loop's dry-run targets would have done; an
// operator's dry run (Plan, Reclaim with dry_run) is not a hygiene action.
func (e *Engine) countDryRun(job Job, o redisx.Outcome, n int64) {
	if job.Source == events.SourceHygiene && (o.Acted() || o.Stuck()) {
		e.metrics.dryRun.WithLabelValues(job.Target.Labels(string(o))...).Add(float64(n))
	}
}
