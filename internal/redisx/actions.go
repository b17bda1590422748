package redisx

import (
	"context"
	_ "embed" // the guarded actions are Lua files beside this one
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/guard.lua
	guardLua string
	//go:embed lua/entries.lua
	entriesLua string
	//go:embed lua/reclaim.lua
	reclaimLua string
	//go:embed lua/delconsumer.lua
	delConsumerLua string
	//go:embed lua/collisions.lua
	collisionsLua string

	// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT, so a
	// Redis restart or SCRIPT FLUSH costs one extra call, never an error.
	reclaimScript     = redis.NewScript(guardLua + entriesLua + reclaimLua)
	delConsumerScript = redis.NewScript(delConsumerLua)
	collisionsScript  = redis.NewScript(guardLua + collisionsLua)
)

// EntryOutcome is what a guarded action did to one entry.
type EntryOutcome struct {
	ID      string
	Outcome Outcome
	// Detail is the copy's id (requeued), the new owner (claimed), the
	// dead-letter record's id (dead-lettered), or why a write failed.
	Detail string
	// Deliveries is the entry's total deliveries, carried count included.
	Deliveries int64
	// From is the consumer a dead-lettered entry was taken from, where
	// the batch's consumer is not it: the two-step path finishes entries
	// its holding consumer holds. Empty otherwise, or when not known.
	From string
}

// Reclaim describes one batch of guarded reclaims from one consumer.
type Reclaim struct {
	Stream, Group string
	// Consumer is the owner the entries are taken from.
	Consumer string
	// ClaimTo is the live consumer that receives the entries; empty
	// requeues (or releases) them instead.
	ClaimTo string
	// Release gives the entries back with XNACK (Capabilities.Release)
	// instead of requeueing a copy: each keeps its id, pending with no
	// owner, for a reader that claims.
	Release bool
	// AckDel lets the script acknowledge and delete with one XACKDEL
	// (Capabilities.AckDel) where DeleteOriginal asks for both.
	AckDel bool
	// MinIdle is how long each entry must have been idle.
	MinIdle time.Duration
	// CarryField names the field that carries the delivery count across a
	// requeue; empty turns carrying off.
	CarryField string
	// MaxDeliveries dead-letters an entry delivered this many times; 0 is off.
	MaxDeliveries int64
	// DeadLetterStream receives dead-lettered entries. It must hash to the
	// stream's slot under Redis Cluster unless Hold is set.
	DeadLetterStream string
	// Hold, when set, is step 1 of the two-step dead-letter path: a poison
	// entry moves to this holding consumer instead, and FinishHeld writes
	// its record and acknowledges it.
	Hold string
	// DeleteOriginal XDELs the original after a requeue or dead-letter.
	DeleteOriginal bool
	// DryRun runs every guard and decision and writes nothing.
	DryRun bool
	// Wait is the WAIT after the call; a dry run writes nothing to wait for.
	Wait Durability
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
	Counts map[Outcome]int64
	// Outcomes lists every entry with IDs; without, only the entries whose
	// outcome is not plain requeued, claimed or released.
	Outcomes []EntryOutcome
	// AckDelRefused says AckDel was asked for and the server or the user
	// refused XACKDEL: the script acknowledged and deleted with XACK and
	// XDEL instead.
	AckDelRefused bool
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
	case r.Hold != "" && (r.Hold == r.Consumer || r.Hold == r.ClaimTo):
		return errors.New("the holding consumer must differ from the owner and the claim target")
	case r.ClaimTo == r.Consumer:
		return errors.New("claim needs a target consumer other than the owner")
	case r.Release && r.ClaimTo != "":
		return errors.New("an entry is either claimed or released, not both")
	case r.MaxDeliveries > 0 && r.DeadLetterStream == "":
		return errors.New("dead-lettering needs a dead-letter stream")
	case r.DeadLetterStream == r.Stream && r.DeadLetterStream != "":
		return errors.New("the dead-letter stream must differ from the stream")
	case len(r.IDs) == 0 && r.Count < 1:
		return errors.New("a reclaim names ids or a page count")
	}
	for _, id := range r.IDs {
		if !ValidID(id) {
			return fmt.Errorf("entry id %q: want <milliseconds>-<sequence>", id)
		}
	}
	return nil
}

// RunReclaim applies one batch in one script call. When the replicas
// Wait asks for fall behind, it returns what the batch did together with a
// *ReplicasBehindError.
func RunReclaim(ctx context.Context, c redis.UniversalClient, r Reclaim) (Result, error) {
	if err := r.validate(); err != nil {
		return Result{}, err
	}
	dlq := r.DeadLetterStream
	if dlq == "" || r.Hold != "" {
		dlq = r.Stream
	}
	args := make([]any, 0, 13+len(r.IDs))
	args = append(args, r.Group, r.Consumer, r.MinIdle.Milliseconds(), r.CarryField,
		r.MaxDeliveries, boolArg(r.DeleteOriginal), r.ClaimTo, r.After, r.Count, boolArg(r.DryRun), r.Hold,
		boolArg(r.Release), boolArg(r.AckDel))
	for _, id := range r.IDs {
		args = append(args, id)
	}
	var reply []any
	wait := r.Wait
	if r.DryRun {
		wait = Durability{}
	}
	err := durably(ctx, c, r.Stream, wait, func(s redis.Scripter) error {
		var err error
		reply, err = reclaimScript.Run(ctx, s, []string{r.Stream, dlq}, args...).Slice()
		return err
	})
	var behind *ReplicasBehindError
	if err != nil && !errors.As(err, &behind) {
		return Result{}, fmt.Errorf("reclaim from %s on %s/%s: %w", r.Consumer, r.Stream, r.Group, err)
	}
	if len(reply) != 4 {
		return Result{}, fmt.Errorf("reclaim: unexpected reply %v", reply)
	}
	res := Result{Counts: map[Outcome]int64{}}
	res.Last, _ = reply[0].(string)
	res.AckDelRefused = reply[3] == "1"
	flat, _ := reply[1].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		outcome, _ := flat[i].(string)
		n, _ := flat[i+1].(int64)
		res.Counts[Outcome(outcome)] = n
	}
	listed, _ := reply[2].([]any)
	if res.Outcomes, err = parseOutcomes(listed); err != nil {
		return Result{}, err
	}
	if behind != nil {
		return res, behind
	}
	return res, nil
}

// DeleteConsumer deletes a consumer only if its PEL is empty and it has not
// read for minIdle, checked in the same script. It returns ConsumerDeleted,
// DeleteGone, DeleteHasPending or DeleteNotIdle; a dry run checks the same
// and deletes nothing.
func DeleteConsumer(ctx context.Context, c redis.Scripter, stream, group, consumer string, minIdle time.Duration, dryRun bool) (Outcome, error) {
	res, err := delConsumerScript.Run(ctx, c, []string{stream}, group, consumer, minIdle.Milliseconds(), boolArg(dryRun)).Slice()
	if err != nil {
		return "", fmt.Errorf("delete consumer %s on %s/%s: %w", consumer, stream, group, err)
	}
	if len(res) != 2 {
		return "", fmt.Errorf("delete consumer: unexpected reply %v", res)
	}
	outcome, _ := res[0].(string)
	if dropped, _ := res[1].(int64); dropped != 0 {
		// Unreachable while the script checks the PEL; said loudly if not.
		return Outcome(outcome), fmt.Errorf("delete consumer %s dropped %d pending entries", consumer, dropped)
	}
	return Outcome(outcome), nil
}

// Collisions returns, by id, the field each of ids holds that a reclaim
// with this carry field (and dead-lettering, when deadLetter) would write
// over: the entries a reclaim leaves pending as FieldCollision. The rule is
// the reclaim script's own, run by a script that only reads.
func Collisions(ctx context.Context, c redis.Scripter, stream string, ids []string, carry string, deadLetter bool) (map[string]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 2+len(ids))
	args = append(args, carry, boolArg(deadLetter))
	for _, id := range ids {
		args = append(args, id)
	}
	flat, err := collisionsScript.Run(ctx, c, []string{stream}, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("check %d entries of %s for field collisions: %w", len(ids), stream, err)
	}
	out := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out[flat[i]] = flat[i+1]
	}
	return out, nil
}

func parseOutcomes(res []any) ([]EntryOutcome, error) {
	out := make([]EntryOutcome, len(res))
	for i, row := range res {
		fields, ok := row.([]any)
		if !ok || len(fields) < 2 {
			return nil, fmt.Errorf("unexpected script reply row %v", row)
		}
		o := EntryOutcome{}
		o.ID, _ = fields[0].(string)
		outcome, _ := fields[1].(string)
		o.Outcome = Outcome(outcome)
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
