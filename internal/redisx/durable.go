package redisx

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability is what a connection asks of hygiene's writes: after each
// guarded script call, WAIT until Replicas replicas acknowledged them, at
// most Timeout. Replication is asynchronous: without WAIT, a failover may
// promote a replica that never saw an acknowledgement pelwarden wrote, and
// the entry is delivered again. WAIT makes that visible and rarer; it does
// not make Redis synchronous (a timed-out WAIT leaves the write done).
type Durability struct {
	Replicas int
	Timeout  time.Duration
}

// ReplicasBehindError says a guarded write was done on the master but
// fewer replicas than asked acknowledged it in time. The write stands;
// the caller stops and retries later (every guarded step is safe to run
// again), and a failover before the replicas catch up may undo it.
type ReplicasBehindError struct {
	Key       string
	Want, Got int64
	Timeout   time.Duration
}

func (e *ReplicasBehindError) Error() string {
	return fmt.Sprintf("WAIT after a write to %s: %d of %d replicas acknowledged it within %s", e.Key, e.Got, e.Want, e.Timeout)
}

// durably runs one guarded script call through fn and then, when d asks
// for replicas, WAITs on the same connection: WAIT counts the writes of
// the connection it is sent on, so both go over one connection to the
// master of key (under Cluster, the master of key's slot).
func durably(ctx context.Context, c redis.UniversalClient, key string, d Durability, fn func(redis.Scripter) error) error {
	if d.Replicas < 1 {
		return fn(c)
	}
	var node *redis.Client
	switch cl := c.(type) {
	case *redis.ClusterClient:
		var err error
		if node, err = cl.MasterForKey(ctx, key); err != nil {
			return fmt.Errorf("master of %s: %w", key, err)
		}
	case *redis.Client:
		node = cl
	default:
		return fmt.Errorf("waitReplicas: a %T cannot pin a connection to the master of %s", c, key)
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	if err := fn(conn); err != nil {
		return err
	}
	got, err := conn.Wait(ctx, d.Replicas, d.Timeout).Result()
	if err != nil {
		return fmt.Errorf("WAIT after a write to %s: %w", key, err)
	}
	if got < int64(d.Replicas) {
		return &ReplicasBehindError{Key: key, Want: int64(d.Replicas), Got: got, Timeout: d.Timeout}
	}
	return nil
}
