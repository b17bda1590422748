package redisx

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseScript takes the lease when it is free and extends it when it is
// already ours, in one step. KEYS[1] lease key; ARGV: holder, ttl ms. It
// reads first: renewing, the common case, is two commands.
var leaseScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// releaseScript gives the lease up only if it is ours.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Lease picks one scanner among pelwarden replicas. It saves work, nothing
// more: every action is guarded on its own, so two holders at once (a
// paused process whose lease expired) still act on each entry once.
type Lease struct {
	Client redis.Scripter
	Key    string
	Holder string
	TTL    time.Duration
}

// Hold takes or extends the lease and reports whether this holder has it.
func (l Lease) Hold(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, l.Client, []string{l.Key}, l.Holder, l.TTL.Milliseconds()).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Release gives the lease up if this holder has it, so another replica can
// scan without waiting for the TTL.
func (l Lease) Release(ctx context.Context) error {
	err := releaseScript.Run(ctx, l.Client, []string{l.Key}, l.Holder).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// Pipeliner is what a batch of lease calls needs of a client: one
// pipeline, whatever the connection mode.
type Pipeliner interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// HoldAll takes or extends many leases of one holder in one round trip
// (one pipeline of the same guarded script per key, so keys in different
// cluster slots work too) and reports, per key, whether the holder has it.
// Each key is decided on its own, exactly as Hold decides it.
func HoldAll(ctx context.Context, c Pipeliner, keys []string, holder string, ttl time.Duration) ([]bool, error) {
	return runAll(ctx, c, leaseScript, keys, holder, ttl.Milliseconds())
}

// ReleaseAll gives up every one of keys this holder has, in one round
// trip; keys another holder has are left alone.
func ReleaseAll(ctx context.Context, c Pipeliner, keys []string, holder string) error {
	_, err := runAll(ctx, c, releaseScript, keys, holder)
	return err
}

// runAll runs script once per key in one pipeline by its SHA; after a
// Redis restart flushed the script cache it runs the batch once more with
// EVAL, which caches the script again (pelwarden's ACL grants EVALSHA and
// EVAL, not SCRIPT LOAD). Both lease scripts are idempotent, so running a
// key twice is safe.
func runAll(ctx context.Context, c Pipeliner, script *redis.Script, keys []string, args ...any) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	run, retried := script.EvalSha, false
	for {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = run(ctx, pipe, []string{k}, args...)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && !retried {
			run, retried = script.Eval, true
			continue
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		out := make([]bool, len(keys))
		for i, cmd := range cmds {
			n, err := cmd.Int()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
			out[i] = n == 1
		}
		return out, nil
	}
}
