package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Slot returns the hash slot of key, as the cluster computes it.
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	var slot int64
	err := c.anyLive(tb.Context(), func(r *redis.Client) error {
		var err error
		slot, err = r.ClusterKeySlot(tb.Context(), key).Result()
		return err
	})
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return int(slot)
}

// MasterForKey returns the master serving key's slot.
func (c *Cluster) MasterForKey(tb testing.TB, key string) *ClusterNode {
	tb.Helper()
	return c.MasterOfSlot(tb, c.Slot(tb, key))
}

// MasterOfSlot returns the master serving slot, as a running node sees it.
func (c *Cluster) MasterOfSlot(tb testing.TB, slot int) *ClusterNode {
	tb.Helper()
	n, err := c.masterOfSlot(tb.Context(), slot)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (c *Cluster) masterOfSlot(ctx context.Context, slot int) (*ClusterNode, error) {
	var owners []slotOwner
	err := c.anyLive(ctx, func(r *redis.Client) error {
		var err error
		owners, err = slotOwners(ctx, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SLOTS: %w", err)
	}
	for _, o := range owners {
		if o.start <= slot && slot <= o.end {
			if n := c.node(o.addr); n != nil {
				return n, nil
			}
			return nil, fmt.Errorf("redistest: slot %d is served by %s, not a node of this cluster", slot, o.addr)
		}
	}
	return nil, fmt.Errorf("redistest: slot %d is not served", slot)
}

// Masters returns the running nodes that are masters now.
func (c *Cluster) Masters(tb testing.TB) []*ClusterNode {
	tb.Helper()
	var masters []*ClusterNode
	err := c.eachLive(tb.Context(), func(n *ClusterNode, r *redis.Client) error {
		repl, err := r.Info(tb.Context(), "replication").Result()
		if err == nil && infoField(repl, "role") == "master" {
			masters = append(masters, n)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return masters
}

// ReplicaOf returns a running replica of master; it fails the test if
// master has none.
func (c *Cluster) ReplicaOf(tb testing.TB, master *ClusterNode) *ClusterNode {
	tb.Helper()
	n, err := c.replicaOf(tb.Context(), master)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (c *Cluster) replicaOf(ctx context.Context, master *ClusterNode) (*ClusterNode, error) {
	var found *ClusterNode
	err := c.eachLive(ctx, func(n *ClusterNode, r *redis.Client) error {
		repl, err := r.Info(ctx, "replication").Result()
		if err == nil && found == nil && infoField(repl, "role") == "slave" &&
			infoField(repl, "master_port") == strconv.Itoa(master.port) {
			found = n
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("redistest: master %s has no running replica", master.Addr())
	}
	return found, nil
}

// Failover runs CLUSTER FAILOVER on a replica of master, the coordinated
// handover a maintenance does: the replica catches up, takes master's
// slots, and master becomes its replica. It waits until the cluster is
// healthy again and returns the new master.
func (c *Cluster) Failover(tb testing.TB, master *ClusterNode) *ClusterNode {
	tb.Helper()
	ctx := tb.Context()
	replica := c.ReplicaOf(tb, master)
	if err := replica.do(ctx, func(r *redis.Client) error { return r.ClusterFailover(ctx).Err() }); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	c.waitPromoted(tb, replica)
	return replica
}

// KillMaster kills master with SIGKILL, as a crash would, and, when it has
// a replica, waits until the replica has been voted master and the cluster
// is healthy again; it returns the new master, or nil when master had no
// replica (its slots stay down until master.Restart).
func (c *Cluster) KillMaster(tb testing.TB, master *ClusterNode) *ClusterNode {
	tb.Helper()
	replica, err := c.replicaOf(tb.Context(), master)
	master.Kill()
	if err != nil {
		return nil
	}
	c.waitPromoted(tb, replica)
	return replica
}

func (c *Cluster) waitPromoted(tb testing.TB, n *ClusterNode) {
	tb.Helper()
	ctx := tb.Context()
	err := eventually(ctx, "replica "+n.Addr()+" promoted", func(ctx context.Context) error {
		return n.do(ctx, func(r *redis.Client) error {
			repl, err := r.Info(ctx, "replication").Result()
			if err == nil && infoField(repl, "role") != "master" {
				err = errors.New("still a replica")
			}
			return err
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	c.WaitHealthy(tb)
}

// anyLive runs fn against the first running node that answers.
func (c *Cluster) anyLive(ctx context.Context, fn func(r *redis.Client) error) error {
	err := errors.New("no running node")
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		if err = n.do(ctx, fn); err == nil {
			return nil
		}
	}
	return err
}

// slotsOf counts the slots n serves.
func (c *Cluster) slotsOf(tb testing.TB, n *ClusterNode) int {
	tb.Helper()
	var owners []slotOwner
	err := n.do(tb.Context(), func(r *redis.Client) error {
		var err error
		owners, err = slotOwners(tb.Context(), r)
		return err
	})
	if err != nil {
		tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	count := 0
	for _, o := range owners {
		if o.id == n.id {
			count += o.end - o.start + 1
		}
	}
	return count
}
