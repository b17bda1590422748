package redisx

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseScript takes the lease when it is free and extends it when it is
// already ours, in one step. KEYS[1] lease key; ARGV: holder, ttl ms.
var leaseScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
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
