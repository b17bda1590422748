package redisx

import (
	"context"
	_ "embed" // the two-step dead-letter scripts are Lua files beside this one
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/deadletter.lua
	deadLetterLua string
	//go:embed lua/ackheld.lua
	ackHeldLua string

	deadLetterScript = redis.NewScript(guardLua + deadLetterLua)
	ackHeldScript    = redis.NewScript(guardLua + ackHeldLua)
)

// DefaultLookBack is how many dead-letter records step 2 reads back, at
// most, looking for its own earlier copy. The copy it looks for was
// written after the entry was held, and held entries are finished in the
// same batch or at the next scan, so the records between are the ones
// written in that gap: a few batches' worth, far below this.
const DefaultLookBack = 1000

// RecordFields are the fields pelwarden appends to a dead-letter record,
// after the entry's own.
const (
	FieldOriginID     = "pelwarden-origin-id"
	FieldOriginStream = "pelwarden-origin-stream"
	FieldGroup        = "pelwarden-group"
	FieldConsumer     = "pelwarden-consumer"
	FieldDeliveries   = "pelwarden-deliveries"
	FieldReason       = "pelwarden-reason"
)

// Held describes steps 2 and 3 of the two-step dead-letter path for the
// entries a holding consumer holds: write each one's record to the
// dead-letter stream (idempotently), then acknowledge it.
type Held struct {
	Stream, Group, Holder string
	DeadLetterStream      string
	// Consumer is the consumer the entries were taken from, for their
	// records; empty when not known: the hold step keeps no note of it, so
	// entries a stopped run left held get a record with an empty consumer.
	Consumer string
	// CarryField names the field holding a carried delivery count.
	CarryField string
	// DeleteOriginal XDELs the original once acknowledged.
	DeleteOriginal bool
	DryRun         bool
	// Wait is the WAIT after each write, on the node written to.
	Wait Durability
	// LookBack bounds how many records step 2 reads back; 0 is DefaultLookBack.
	LookBack int64
	// IDs names the entries; without, the batch is the holder's next Count
	// entries above After.
	IDs   []string
	After string
	Count int64
}

func (h Held) validate() error {
	switch {
	case h.Holder == "" || h.DeadLetterStream == "":
		return errors.New("finishing held entries needs the holder and the dead-letter stream")
	case h.DeadLetterStream == h.Stream:
		return errors.New("the dead-letter stream must differ from the stream")
	case len(h.IDs) == 0 && h.Count < 1:
		return errors.New("finishing held entries names ids or a page count")
	}
	return nil
}

// HeldEntry is one held entry as step 2 needs it.
type HeldEntry struct {
	ID string
	// Held is how long the holder has held it.
	Held time.Duration
	// Deliveries is the entry's PEL delivery count.
	Deliveries int64
	// Fields is the stream entry; nil when it was deleted (a tombstone).
	Fields []string
}

// FinishHeld runs steps 2 and 3 for one page of held entries. Entries
// whose step 2 found an earlier copy are acknowledged without a second
// one; entries whose step 2 failed stay held for the next run. When the
// replicas Wait asks for fall behind, it stops there, before the entry is
// acknowledged, and returns what was done with a *ReplicasBehindError.
func FinishHeld(ctx context.Context, c redis.UniversalClient, h Held) (Result, error) {
	if err := h.validate(); err != nil {
		return Result{}, err
	}
	entries, err := ReadHeld(ctx, c, h)
	if err != nil {
		return Result{}, err
	}
	res := Result{Counts: map[Outcome]int64{}, Last: h.After}
	ack := make([]string, 0, len(entries))
	records := map[string]Record{}
	tombs := map[string]bool{}
	for _, e := range entries {
		res.Last = e.ID
		if e.Fields == nil {
			ack, tombs[e.ID] = append(ack, e.ID), true
			records[e.ID] = Record{Deliveries: e.Deliveries, Consumer: h.Consumer}
			continue
		}
		rec, err := AddRecord(ctx, c, h, e)
		var behind *ReplicasBehindError
		if errors.As(err, &behind) {
			return res, err
		}
		if err != nil {
			res.add(EntryOutcome{ID: e.ID, Outcome: Failed, Detail: "dead-letter: " + err.Error(), Deliveries: e.Deliveries})
			continue
		}
		ack, records[e.ID] = append(ack, e.ID), rec
	}
	if h.DryRun {
		for _, id := range ack {
			o := EntryOutcome{ID: id, Outcome: DeadLettered}
			if tombs[id] {
				o.Outcome = Tombstoned
			}
			res.add(records[id].outcome(o))
		}
		return res, nil
	}
	acked, err := AckHeld(ctx, c, h, ack)
	var behind *ReplicasBehindError
	if err != nil && !errors.As(err, &behind) {
		return res, err
	}
	for _, o := range acked {
		if o.Outcome == DeadLettered && tombs[o.ID] {
			o.Outcome = Tombstoned
		}
		if o.Outcome == DeadLettered || o.Outcome == Tombstoned {
			o = records[o.ID].outcome(o)
		}
		res.add(o)
	}
	return res, err
}

// Record is what step 2 wrote, or found written, for one held entry.
type Record struct {
	// ID is the record's id in the dead-letter stream; empty for a
	// tombstone, which gets none, and in a dry run.
	ID string
	// Deliveries is the entry's total deliveries, carried count included,
	// as the record says it.
	Deliveries int64
	// Consumer is the consumer the entry was taken from, as the record
	// says it; empty when not known.
	Consumer string
}

// outcome is o with the record's id, delivery count and consumer.
func (r Record) outcome(o EntryOutcome) EntryOutcome {
	o.Detail, o.Deliveries, o.From = r.ID, r.Deliveries, r.Consumer
	return o
}

func (r *Result) add(o EntryOutcome) {
	r.Counts[o.Outcome]++
	r.Outcomes = append(r.Outcomes, o)
}

// ReadHeld reads a page of the holder's entries with their fields, in one
// round trip for the PEL and one pipeline for the entries (one slot).
func ReadHeld(ctx context.Context, c redis.UniversalClient, h Held) ([]HeldEntry, error) {
	var rows []redis.XPendingExt
	var err error
	if len(h.IDs) > 0 {
		rows, err = heldRows(ctx, c, h)
	} else {
		start := "-"
		if h.After != "" {
			start = "(" + h.After
		}
		rows, err = c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: h.Stream, Group: h.Group, Start: start, End: "+", Count: h.Count, Consumer: h.Holder}).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("read held entries on %s/%s: %w", h.Stream, h.Group, err)
	}
	// Raw XRANGE keeps the entry's field order, which go-redis's map loses.
	cmds := make([]*redis.Cmd, len(rows))
	if len(rows) > 0 {
		_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range rows {
				cmds[i] = p.Do(ctx, "XRANGE", h.Stream, r.ID, r.ID)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read held entries on %s: %w", h.Stream, err)
		}
	}
	out := make([]HeldEntry, len(rows))
	for i, r := range rows {
		out[i] = HeldEntry{ID: r.ID, Held: r.Idle, Deliveries: r.RetryCount}
		out[i].Fields = entryFields(cmds[i].Val())
	}
	return out, nil
}

// heldRows is the PEL rows of the named entries the holder holds.
func heldRows(ctx context.Context, c redis.UniversalClient, h Held) ([]redis.XPendingExt, error) {
	cmds := make([]*redis.XPendingExtCmd, len(h.IDs))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range h.IDs {
			cmds[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: h.Stream, Group: h.Group, Start: id, End: id, Count: 1, Consumer: h.Holder})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var rows []redis.XPendingExt
	for _, cmd := range cmds {
		rows = append(rows, cmd.Val()...)
	}
	return rows, nil
}

// entryFields is the field list of a one-entry XRANGE reply, nil when the
// entry is gone.
func entryFields(reply any) []string {
	entries, _ := reply.([]any)
	if len(entries) != 1 {
		return nil
	}
	entry, _ := entries[0].([]any)
	if len(entry) != 2 {
		return nil
	}
	raw, _ := entry[1].([]any)
	out := make([]string, len(raw))
	for i, v := range raw {
		out[i], _ = v.(string)
	}
	return out
}

// AddRecord is step 2 for one held entry: it writes the entry's record to
// the dead-letter stream unless the look-back finds this step's own
// earlier copy, and returns the record either way.
func AddRecord(ctx context.Context, c redis.UniversalClient, h Held, e HeldEntry) (Record, error) {
	lookBack := h.LookBack
	if lookBack < 1 {
		lookBack = DefaultLookBack
	}
	args := make([]any, 0, 9+len(e.Fields))
	args = append(args, h.Stream, h.Group, e.ID, e.Held.Milliseconds(), lookBack, boolArg(h.DryRun), h.CarryField, e.Deliveries, h.Consumer)
	for _, f := range e.Fields {
		args = append(args, f)
	}
	var reply []string
	wait := h.Wait
	if h.DryRun {
		wait = Durability{}
	}
	err := durably(ctx, c, h.DeadLetterStream, wait, func(s redis.Scripter) error {
		var err error
		reply, err = deadLetterScript.Run(ctx, s, []string{h.DeadLetterStream}, args...).StringSlice()
		return err
	})
	var behind *ReplicasBehindError
	if errors.As(err, &behind) {
		return Record{}, err
	}
	if err != nil {
		return Record{}, fmt.Errorf("dead-letter %s to %s: %w", e.ID, h.DeadLetterStream, err)
	}
	if len(reply) < 2 {
		return Record{}, fmt.Errorf("dead-letter: unexpected reply %v", reply)
	}
	switch reply[0] {
	case "added", "found":
		if len(reply) != 4 {
			return Record{}, fmt.Errorf("dead-letter: unexpected reply %v", reply)
		}
		// A record an earlier version wrote has no consumer field and
		// reads as ''.
		n, _ := strconv.ParseInt(reply[2], 10, 64)
		return Record{ID: reply[1], Deliveries: n, Consumer: reply[3]}, nil
	case "look-back-exhausted":
		return Record{}, fmt.Errorf("%d records of %s since %s was held, and none is its record: it stays held (raise the look-back or finish it by hand)",
			lookBack, h.DeadLetterStream, e.ID)
	default:
		return Record{}, errors.New(reply[1])
	}
}

// AckHeld is step 3: acknowledge each entry the holder still holds.
func AckHeld(ctx context.Context, c redis.UniversalClient, h Held, ids []string) ([]EntryOutcome, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 3+len(ids))
	args = append(args, h.Group, h.Holder, boolArg(h.DeleteOriginal))
	for _, id := range ids {
		args = append(args, id)
	}
	var reply []any
	err := durably(ctx, c, h.Stream, h.Wait, func(s redis.Scripter) error {
		var err error
		reply, err = ackHeldScript.Run(ctx, s, []string{h.Stream}, args...).Slice()
		return err
	})
	var behind *ReplicasBehindError
	if err != nil && !errors.As(err, &behind) {
		return nil, fmt.Errorf("acknowledge held entries on %s/%s: %w", h.Stream, h.Group, err)
	}
	outs, perr := parseOutcomes(reply)
	if perr != nil {
		return nil, perr
	}
	return outs, err
}
