package redisx

import (
	"context"
	_ "embed" // the guarded actions are Lua files beside this one
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/guard.lua
	guardLua string
	//go:embed lua/reclaim.lua
	reclaimLua string
	//go:embed lua/tombstone.lua
	tombstoneLua string
	//go:embed lua/delconsumer.lua
	delConsumerLua string

	// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT, so a
	// Redis restart or SCRIPT FLUSH costs one extra call, never an error.
	reclaimScript     = redis.NewScript(guardLua + reclaimLua)
	tombstoneScript   = redis.NewScript(guardLua + tombstoneLua)
	delConsumerScript = redis.NewScript(delConsumerLua)
)

// Outcomes of a guarded action on one entry.
const (
	Requeued     = "requeued"
	Claimed      = "claimed"
	DeadLettered = "dead-lettered"
	Tombstoned   = "tombstone"
	// Failed means a write failed (Outcome.Detail says why); the entry was
	// left exactly as it was.
	Failed = "failed"
	// The skip reasons: the guard found the entry no longer fit to touch.
	NotPending   = "not-pending"
	OwnerChanged = "owner-changed"
	NotIdle      = "not-idle"
	EntryExists  = "entry-exists"
	// DuplicateID: the batch named the entry already (under another id).
	DuplicateID = "duplicate-id"
)

var entryID = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

// Mode is what a reclaim does with an entry that passes the guard.
type Mode string

// Reclaim modes.
const (
	ModeRequeue    Mode = "requeue"
	ModeClaim      Mode = "claim"
	ModeDeadLetter Mode = "deadletter"
)

// Outcome is what a guarded action did to one entry.
type Outcome struct {
	ID string
	// Result is one of the outcome constants.
	Result string
	// Detail is the copy's id (requeued), the new owner (claimed) or the
	// dead-letter record's id (dead-lettered).
	Detail string
	// Deliveries is the entry's total deliveries, carried count included.
	Deliveries int64
}

// Acted reports whether the action changed the entry.
func (o Outcome) Acted() bool {
	switch o.Result {
	case Requeued, Claimed, DeadLettered, Tombstoned:
		return true
	}
	return false
}

// Reclaim describes one batch of guarded reclaims from one consumer.
type Reclaim struct {
	Stream, Group string
	// Consumer is the owner the entries are taken from.
	Consumer string
	Mode     Mode
	// ClaimTo is the live consumer that receives the entries in claim mode.
	ClaimTo string
	// MinIdle is how long each entry must have been idle.
	MinIdle time.Duration
	// CarryField names the field that carries the delivery count across a
	// requeue; empty turns carrying off.
	CarryField string
	// MaxDeliveries dead-letters an entry delivered this many times; 0 is off.
	MaxDeliveries int64
	// DeadLetterStream receives dead-lettered entries. It must hash to the
	// stream's slot under Redis Cluster.
	DeadLetterStream string
	// Reason is recorded on entries dead-lettered in ModeDeadLetter.
	Reason string
	// DeleteOriginal XDELs the original after a requeue or dead-letter.
	DeleteOriginal bool
	// IDs names the entries, each guarded on its own. Without IDs the batch
	// is the consumer's next Count entries above After idle at least
	// MinIdle, selected inside the script.
	IDs   []string
	After string
	Count int64
}

// Result is what one reclaim batch did.
type Result struct {
	// Last is the last id the batch looked at: the After of the next batch.
	Last string
	// Counts is the number of entries per outcome.
	Counts map[string]int64
	// Outcomes lists every entry with IDs; without, only the entries whose
	// outcome is not plain requeued or claimed.
	Outcomes []Outcome
}

// Total is the number of entries the batch looked at.
func (r Result) Total() int64 {
	var n int64
	for _, c := range r.Counts {
		n += c
	}
	return n
}

func (r Reclaim) validate() error {
	switch {
	case r.Mode != ModeRequeue && r.Mode != ModeClaim && r.Mode != ModeDeadLetter:
		return fmt.Errorf("reclaim mode %q: want requeue, claim or deadletter", r.Mode)
	case r.Mode == ModeClaim && (r.ClaimTo == "" || r.ClaimTo == r.Consumer):
		return errors.New("claim needs a target consumer other than the owner")
	case (r.MaxDeliveries > 0 || r.Mode == ModeDeadLetter) && r.DeadLetterStream == "":
		return errors.New("dead-lettering needs a dead-letter stream")
	case r.DeadLetterStream == r.Stream && r.DeadLetterStream != "":
		return errors.New("the dead-letter stream must differ from the stream")
	case len(r.IDs) == 0 && r.Count < 1:
		return errors.New("a reclaim names ids or a page count")
	}
	for _, id := range r.IDs {
		if !entryID.MatchString(id) {
			return fmt.Errorf("entry id %q: want <milliseconds>-<sequence>", id)
		}
	}
	return nil
}

// RunReclaim applies one batch in one script call.
func RunReclaim(ctx context.Context, c redis.Scripter, r Reclaim) (Result, error) {
	if err := r.validate(); err != nil {
		return Result{}, err
	}
	dlq := r.DeadLetterStream
	if dlq == "" {
		dlq = r.Stream
	}
	args := make([]any, 0, 11+len(r.IDs))
	args = append(args, string(r.Mode), r.Group, r.Consumer, r.MinIdle.Milliseconds(), r.CarryField,
		r.MaxDeliveries, boolArg(r.DeleteOriginal), r.ClaimTo, r.Reason, r.After, r.Count)
	for _, id := range r.IDs {
		args = append(args, id)
	}
	reply, err := reclaimScript.Run(ctx, c, []string{r.Stream, dlq}, args...).Slice()
	if err != nil {
		return Result{}, fmt.Errorf("reclaim from %s on %s/%s: %w", r.Consumer, r.Stream, r.Group, err)
	}
	if len(reply) != 3 {
		return Result{}, fmt.Errorf("reclaim: unexpected reply %v", reply)
	}
	res := Result{Counts: map[string]int64{}}
	res.Last, _ = reply[0].(string)
	flat, _ := reply[1].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		outcome, _ := flat[i].(string)
		n, _ := flat[i+1].(int64)
		res.Counts[outcome] = n
	}
	listed, _ := reply[2].([]any)
	if res.Outcomes, err = parseOutcomes(listed); err != nil {
		return Result{}, err
	}
	return res, nil
}

// RunTombstone acknowledges PEL ids whose stream entries are gone.
func RunTombstone(ctx context.Context, c redis.Scripter, stream, group, consumer string, minIdle time.Duration, ids []string) ([]Outcome, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	for _, id := range ids {
		if !entryID.MatchString(id) {
			return nil, fmt.Errorf("entry id %q: want <milliseconds>-<sequence>", id)
		}
	}
	args := make([]any, 0, 3+len(ids))
	args = append(args, group, consumer, minIdle.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := tombstoneScript.Run(ctx, c, []string{stream}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("tombstone %d ids of %s on %s/%s: %w", len(ids), consumer, stream, group, err)
	}
	return parseOutcomes(res)
}

// DeleteConsumer deletes a consumer only if its PEL is empty and it has not
// read for minIdle, checked in the same script. It returns deleted, gone,
// has-pending or not-idle.
func DeleteConsumer(ctx context.Context, c redis.Scripter, stream, group, consumer string, minIdle time.Duration) (string, error) {
	res, err := delConsumerScript.Run(ctx, c, []string{stream}, group, consumer, minIdle.Milliseconds()).Slice()
	if err != nil {
		return "", fmt.Errorf("delete consumer %s on %s/%s: %w", consumer, stream, group, err)
	}
	if len(res) != 2 {
		return "", fmt.Errorf("delete consumer: unexpected reply %v", res)
	}
	outcome, _ := res[0].(string)
	if dropped, _ := res[1].(int64); outcome == "deleted" && dropped != 0 {
		// Unreachable while the script checks the PEL; said loudly if not.
		return outcome, fmt.Errorf("delete consumer %s dropped %d pending entries", consumer, dropped)
	}
	return outcome, nil
}

// PendingPage lists up to count of a consumer's pending entries idle at
// least minIdle with ids above after ("" starts at the beginning).
func PendingPage(ctx context.Context, c redis.Cmdable, stream, group, consumer string, minIdle time.Duration, after string, count int64) ([]redis.XPendingExt, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	return c.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: group, Idle: minIdle, Start: start, End: "+", Count: count, Consumer: consumer,
	}).Result()
}

func parseOutcomes(res []any) ([]Outcome, error) {
	out := make([]Outcome, len(res))
	for i, row := range res {
		fields, ok := row.([]any)
		if !ok || len(fields) < 2 {
			return nil, fmt.Errorf("unexpected script reply row %v", row)
		}
		o := Outcome{}
		o.ID, _ = fields[0].(string)
		o.Result, _ = fields[1].(string)
		if len(fields) >= 4 {
			o.Detail, _ = fields[2].(string)
			o.Deliveries, _ = fields[3].(int64)
		}
		out[i] = o
	}
	return out, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
