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
// master of key (under Cluster, the master of key's slot, followed through
// MOVED and ASK by durablyOnCluster).
func durably(ctx context.Context, c redis.UniversalClient, key string, d Durability, fn func(redis.Scripter) error) error {
	if d.Replicas < 1 {
		return fn(c)
	}
	switch cl := c.(type) {
	case *redis.ClusterClient:
		return durablyOnCluster(ctx, cl, key, d, fn)
	case *redis.Client:
		return callAndWait(ctx, cl, false, key, d, fn)
	}
	return fmt.Errorf("waitReplicas: a %T cannot pin a connection to the master of %s", c, key)
}

// durablyOnCluster is durably on a connection pinned to one node, which,
// unlike the ClusterClient, follows no redirection by itself. While key's
// slot migrates, the old master answers ASK for a key already moved: the
// call goes again on the importing node, after ASKING, and WAITs there.
// Once the slot has moved, MOVED names the new master: the call follows
// it, and the slot map is read again for the next call. Without this a
// scan with waitReplicas stalled for the whole migration window.
func durablyOnCluster(ctx context.Context, cl *redis.ClusterClient, key string, d Durability, fn func(redis.Scripter) error) error {
	node, err := cl.MasterForKey(ctx, key)
	if err != nil {
		return fmt.Errorf("master of %s: %w", key, err)
	}
	asking := false
	for redirects := 0; ; redirects++ {
		err := callAndWait(ctx, node, asking, key, d, fn)
		moved, movedTo := redirect(err)
		if movedTo == "" || redirects >= max(cl.Options().MaxRedirects, 1) {
			return err
		}
		if moved {
			cl.ReloadState(ctx)
		}
		// A node the slot map does not know yet (an importing master with
		// no slot of its own) has no client in the ClusterClient that can
		// be asked for; one made from the node's own options reaches it
		// with the same credentials and TLS, for this call only.
		opts := *node.Options()
		opts.Addr = movedTo
		next := redis.NewClient(&opts)
		defer func() { _ = next.Close() }()
		node, asking = next, !moved
	}
}

// redirect reads a MOVED or ASK answer: whether the slot moved for good,
// and the node to go to; "" when err is neither.
func redirect(err error) (moved bool, addr string) {
	if err == nil {
		return false, ""
	}
	if addr, ok := redis.IsMovedError(err); ok {
		return true, addr
	}
	if addr, ok := redis.IsAskError(err); ok {
		return false, addr
	}
	return false, ""
}

// callAndWait runs fn on one connection of node, then WAIT on it. With
// asking, every script call on it is preceded by ASKING.
func callAndWait(ctx context.Context, node *redis.Client, asking bool, key string, d Durability, fn func(redis.Scripter) error) error {
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	var s redis.Scripter = conn
	if asking {
		s = askingConn{conn}
	}
	if err := fn(s); err != nil {
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

// askingConn sends ASKING before each script call: an importing node
// serves a migrating slot's key only to the command right after ASKING, and
// a script not cached there is an EVALSHA answered NOSCRIPT, then an EVAL.
type askingConn struct{ *redis.Conn }

func (a askingConn) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return a.afterAsking(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha, keys, args...) })
}

func (a askingConn) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return a.afterAsking(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (a askingConn) afterAsking(ctx context.Context, call func(redis.Pipeliner) *redis.Cmd) *redis.Cmd {
	var cmd *redis.Cmd
	// The call's own error is on cmd, which Script.Run reads.
	_, _ = a.Pipelined(ctx, func(p redis.Pipeliner) error {
		_ = p.Process(ctx, redis.NewStatusCmd(ctx, "asking"))
		cmd = call(p)
		return nil
	})
	return cmd
}
