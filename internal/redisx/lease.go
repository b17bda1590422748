package redisx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseScript takes the lease when it is free and extends it when it is
// already ours, in one step. KEYS[1] lease key; ARGV: holder (the lease
// value), ttl ms, identity, started ms. It reads first: renewing, the
// common case, is two commands. A lease held under this identity by a
// process started earlier is taken at once: that is this replica's own
// earlier run, which a crash or a restart left behind; waiting out its TTL
// would only hold hygiene up. A later start of the identity keeps it, so
// two processes given one identity settle on the newer instead of taking
// it from each other at every renewal.
var leaseScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  local identity, started = string.match(holder, '^(.*)@(%d+)%-%d+$')
  if identity ~= ARGV[3] or tonumber(started) >= tonumber(ARGV[4]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// Holder names one pelwarden process in its leases. Identity is the same
// across restarts (hygiene.identity, by default the host name: the pod's
// name in Kubernetes); Started and PID tell this run from an earlier one.
type Holder struct {
	Identity string
	Started  time.Time
	PID      int
}

// lastStart is the latest Started NewHolder gave, so that two holders of
// one process (tests run several pelwardens in one) are never started in
// the same millisecond and stay ordered.
var lastStart atomic.Int64

// NewHolder names this process, started now, under identity.
func NewHolder(identity string) Holder {
	ms := time.Now().UnixMilli()
	for {
		last := lastStart.Load()
		ms = max(ms, last+1)
		if lastStart.CompareAndSwap(last, ms) {
			return Holder{Identity: identity, Started: time.UnixMilli(ms), PID: os.Getpid()}
		}
	}
}

// String is the lease value: identity@<started, Unix ms>-<pid>.
func (h Holder) String() string {
	return fmt.Sprintf("%s@%d-%d", h.Identity, h.Started.UnixMilli(), h.PID)
}

func (h Holder) args(ttl time.Duration) []any {
	return []any{h.String(), ttl.Milliseconds(), h.Identity, strconv.FormatInt(h.Started.UnixMilli(), 10)}
}

var holderValue = regexp.MustCompile(`^(.*)@\d+-\d+$`)

// LeaseIdentity is the identity in a lease value; a value written by a
// pelwarden from before Holder is returned whole.
func LeaseIdentity(value string) string {
	if m := holderValue.FindStringSubmatch(value); m != nil {
		return m[1]
	}
	return value
}

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
	Holder Holder
	TTL    time.Duration
}

// Hold takes or extends the lease and reports whether this holder has it.
func (l Lease) Hold(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, l.Client, []string{l.Key}, l.Holder.args(l.TTL)...).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// Release gives the lease up if this holder has it, so another replica can
// scan without waiting for the TTL.
func (l Lease) Release(ctx context.Context) error {
	err := releaseScript.Run(ctx, l.Client, []string{l.Key}, l.Holder.String()).Err()
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
func HoldAll(ctx context.Context, c Pipeliner, keys []string, holder Holder, ttl time.Duration) ([]bool, error) {
	return runAll(ctx, c, leaseScript, keys, holder.args(ttl)...)
}

// ReleaseAll gives up every one of keys this holder has, in one round
// trip; keys another holder has are left alone.
func ReleaseAll(ctx context.Context, c Pipeliner, keys []string, holder Holder) error {
	_, err := runAll(ctx, c, releaseScript, keys, holder.String())
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
