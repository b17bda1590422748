package hygiene

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Report counts what one scan did (or, in dry run, would have done), by
// outcome: the redisx outcome names, "consumer-deleted", and skip reasons.
type Report struct {
	Counts map[string]int64
	// DryRun says the counts are what the scan would have done.
	DryRun bool
	// claims spreads the scan's claims over the live consumers.
	claims policy.ClaimTally
}

func (r *Report) add(outcome string, n int64) {
	if r.Counts == nil {
		r.Counts = map[string]int64{}
	}
	r.Counts[outcome] += n
}

// Scan runs one pass over t on a fresh read of the liveness view: every
// consumer whose entries may be reclaimed is paged through to the end, then
// ghost consumers with an empty PEL are deleted. Correctness does not depend
// on the lease or on the view being current: each step is guarded in Redis.
func (l *Loop) Scan(ctx context.Context, t Target) (Report, error) {
	rep := Report{DryRun: t.Hygiene.DryRun, claims: policy.ClaimTally{}}
	start := time.Now()
	defer func() { l.metrics.scanTime.WithLabelValues(labels(t)...).Observe(time.Since(start).Seconds()) }()
	c, ok := l.conns.Get(t.Target.Conn)
	if !ok {
		return rep, fmt.Errorf("no redis connection named %q", t.Target.Conn)
	}
	snap, err := l.view.Refresh(ctx, t.Target)
	if err != nil {
		l.metrics.errors.WithLabelValues(labels(t)...).Inc()
		return rep, err
	}
	if snap.StreamMissing || snap.GroupMissing {
		return rep, nil
	}
	for _, cv := range snap.Consumers {
		if _, ok := policy.ReclaimThreshold(cv, t.Hygiene, l.opts.Now()); ok && cv.Pending > 0 {
			if err := l.reclaimConsumer(ctx, c, t, snap, cv, &rep); err != nil {
				l.metrics.errors.WithLabelValues(labels(t)...).Inc()
				return rep, err
			}
		} else if cv.Pending > 0 && cv.Verdict == liveness.Unknown {
			rep.add("skipped:owner-unknown", cv.Pending)
			l.metrics.skipped.WithLabelValues(append(labels(t), "owner-unknown")...).Add(float64(cv.Pending))
		}
	}
	for _, cv := range snap.Consumers {
		if !policy.ShouldDeleteConsumer(cv, t.Hygiene.EntryStale, t.Hygiene) {
			continue
		}
		if err := l.deleteConsumer(ctx, c, t, cv, &rep); err != nil {
			l.metrics.errors.WithLabelValues(labels(t)...).Inc()
			return rep, err
		}
	}
	return rep, nil
}

// reclaimConsumer pages through one owner's entries idle past its reclaim
// threshold, with no ceiling on how many there are.
func (l *Loop) reclaimConsumer(ctx context.Context, c *redis.Client, t Target, snap *liveness.Snapshot, cv liveness.ConsumerView, rep *Report) error {
	h := t.Hygiene
	log := l.opts.Log.With("target", t.Target.String(), "consumer", cv.Name, "verdict", cv.Verdict.String())
	mode, to := redisx.ModeRequeue, ""
	if h.Mode == policy.ReclaimClaim {
		if name, ok := rep.claims.Pick(snap.Consumers, cv.Name); ok {
			mode, to = redisx.ModeClaim, name
		} else if h.ClaimFallback == policy.FallbackSkip {
			rep.add("skipped:no-live-consumer", cv.Pending)
			l.metrics.skipped.WithLabelValues(append(labels(t), "no-live-consumer")...).Add(float64(cv.Pending))
			return nil
		}
	}
	after := ""
	for ctx.Err() == nil {
		minIdle, ok := l.threshold(t, cv)
		if !ok {
			log.Info("owner no longer reclaimable; stopping", "after", after)
			return nil
		}
		var n int64
		var err error
		if h.DryRun {
			n, after, err = l.dryRun(ctx, c, t, cv.Name, mode, minIdle, after, rep, log)
		} else {
			n, after, err = l.apply(ctx, c, t, cv.Name, mode, to, minIdle, after, rep, log)
		}
		if err != nil || n < l.opts.BatchSize {
			return err
		}
	}
	return ctx.Err()
}

// threshold re-reads the owner's verdict before each page: a ghost that
// came back while a long PEL was being paged is left alone. It is computed
// at the page's own time, because a threshold taken from a pod's going
// must not reach entries delivered after it went.
func (l *Loop) threshold(t Target, owner liveness.ConsumerView) (time.Duration, bool) {
	if s, ok := l.view.Peek(t.Target); ok {
		for _, c := range s.Consumers {
			if c.Name == owner.Name {
				owner = c
				break
			}
		}
		// A name gone from the group's consumer list keeps its last view:
		// nothing alive holds it.
	}
	return policy.ReclaimThreshold(owner, t.Hygiene, l.opts.Now())
}

// apply reclaims the owner's next batch above after, selected and guarded
// inside one script call, and returns how many entries it looked at and
// the cursor for the next batch.
func (l *Loop) apply(ctx context.Context, c *redis.Client, t Target, owner string, mode redisx.Mode, to string, minIdle time.Duration, after string, rep *Report, log *slog.Logger) (int64, string, error) {
	h := t.Hygiene
	res, err := redisx.RunReclaim(ctx, c, redisx.Reclaim{
		Stream: t.Target.Stream, Group: t.Target.Group, Consumer: owner, Mode: mode, ClaimTo: to,
		MinIdle: minIdle, CarryField: h.DeliveryCountField, MaxDeliveries: h.MaxDeliveries,
		DeadLetterStream: h.DeadLetterStream, DeleteOriginal: h.DeleteOriginal,
		After: after, Count: l.opts.BatchSize,
	})
	if err != nil {
		return 0, after, err
	}
	if res.Total() == 0 {
		return 0, after, nil
	}
	attrs := []any{"mode", string(mode), "after", after, "last", res.Last}
	if to != "" {
		attrs = append(attrs, "to", to)
	}
	for outcome, n := range res.Counts {
		rep.add(outcome, n)
		attrs = append(attrs, outcome, n)
		l.publish(t, owner, outcome, n, batchDetail(mode, to))
		if (redisx.Outcome{Result: outcome}).Acted() {
			l.metrics.actions.WithLabelValues(append(labels(t), outcome)...).Add(float64(n))
		} else {
			l.metrics.skipped.WithLabelValues(append(labels(t), outcome)...).Add(float64(n))
		}
	}
	for _, o := range res.Outcomes {
		switch o.Result {
		case redisx.Failed:
			l.metrics.errors.WithLabelValues(labels(t)...).Inc()
			log.Error("entry left untouched: a write failed", "id", o.ID, "err", o.Detail)
		case redisx.DeadLettered:
			log.Warn("entry dead-lettered", "id", o.ID, "deliveries", o.Deliveries, "deadLetterStream", h.DeadLetterStream, "record", o.Detail)
		case redisx.Tombstoned:
			log.Info("tombstone acknowledged: the stream entry was deleted", "id", o.ID)
		}
	}
	log.Info("reclaimed", attrs...)
	return res.Total(), res.Last, nil
}

// dryRun lists the batch the loop would take and reports what it would do.
func (l *Loop) dryRun(ctx context.Context, c *redis.Client, t Target, owner string, mode redisx.Mode, minIdle time.Duration, after string, rep *Report, log *slog.Logger) (int64, string, error) {
	page, err := redisx.PendingPage(ctx, c, t.Target.Stream, t.Target.Group, owner, minIdle, after, l.opts.BatchSize)
	if err != nil || len(page) == 0 {
		return 0, after, err
	}
	would := map[string]int64{}
	for _, p := range page {
		outcome := redisx.Requeued
		if mode == redisx.ModeClaim {
			outcome = redisx.Claimed
		}
		// The carried count is unknown without reading the entry; the
		// delivery count Redis keeps is its lower bound.
		if policy.ShouldDeadLetter(p.RetryCount, t.Hygiene.MaxDeliveries) {
			outcome = redisx.DeadLettered
		}
		would[outcome]++
		rep.add(outcome, 1)
		l.metrics.dryRun.WithLabelValues(append(labels(t), outcome)...).Inc()
	}
	log.Info("dry run: would reclaim", "mode", string(mode), "batch", len(page), "first", page[0].ID, "last", page[len(page)-1].ID, "would", would)
	return int64(len(page)), page[len(page)-1].ID, nil
}

func (l *Loop) deleteConsumer(ctx context.Context, c *redis.Client, t Target, cv liveness.ConsumerView, rep *Report) error {
	log := l.opts.Log.With("target", t.Target.String(), "consumer", cv.Name)
	if t.Hygiene.DryRun {
		rep.add("consumer-deleted", 1)
		l.metrics.dryRun.WithLabelValues(append(labels(t), "consumer-deleted")...).Inc()
		log.Info("dry run: would delete ghost consumer (PEL empty)")
		return nil
	}
	out, err := redisx.DeleteConsumer(ctx, c, t.Target.Stream, t.Target.Group, cv.Name, t.Hygiene.EntryStale)
	if err != nil {
		return err
	}
	if out == "deleted" {
		l.publish(t, cv.Name, events.ConsumerDeleted, 1, "its PEL was empty")
		rep.add("consumer-deleted", 1)
		l.metrics.actions.WithLabelValues(append(labels(t), "consumer-deleted")...).Inc()
		log.Info("ghost consumer deleted: its PEL was empty", "reasons", liveness.ReasonsString(cv.Reasons))
		return nil
	}
	rep.add("skipped:delete-"+out, 1)
	l.metrics.skipped.WithLabelValues(append(labels(t), "delete-"+out)...).Inc()
	return nil
}

// publish tells watchers what a batch did: actions and failures, not the
// entries the guard skipped. Dry runs publish nothing, since nothing
// happened.
func (l *Loop) publish(t Target, consumer, outcome string, n int64, detail string) {
	action, ok := EventAction(outcome)
	if !ok || n == 0 {
		return
	}
	l.opts.Events.Publish(events.Event{
		Time: l.opts.Now(), Group: EventGroup(t.Target), Consumer: consumer,
		Action: action, Entries: n, Source: events.SourceHygiene, Detail: detail,
	})
}

// EventAction names a reclaim outcome as an event action, and reports
// whether the outcome is one worth an event (an action or a failure).
func EventAction(outcome string) (string, bool) {
	switch outcome {
	case redisx.Tombstoned:
		return "tombstoned", true
	case redisx.Requeued, redisx.Claimed, redisx.DeadLettered, redisx.Failed, events.ConsumerDeleted:
		return outcome, true
	}
	return "", false
}

// EventGroup is the events key of a target's consumer group.
func EventGroup(t liveness.Target) events.Group {
	return events.Group{Conn: t.Conn, Stream: t.Stream, Group: t.Group}
}

func batchDetail(mode redisx.Mode, to string) string {
	if to != "" {
		return string(mode) + " to " + to
	}
	return string(mode)
}
