package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// migrateBatch is how many keys one MIGRATE moves.
const migrateBatch = 100

// MoveSlot migrates slot, with its keys, to node to (a master) by hand:
// SETSLOT IMPORTING and MIGRATING, MIGRATE in batches, then SETSLOT NODE on
// every master. While it runs, clients of the slot see ASK redirections;
// afterwards MOVED. It reports a failure with tb.Errorf rather than Fatalf,
// so it may run in a goroutine while traffic runs, and returns whether it
// succeeded.
func (c *Cluster) MoveSlot(tb testing.TB, slot int, to *ClusterNode) bool {
	tb.Helper()
	if err := c.moveSlot(tb.Context(), slot, to); err != nil {
		tb.Errorf("redistest: move slot %d to %s: %v", slot, to.Addr(), err)
		return false
	}
	return true
}

func (c *Cluster) moveSlot(ctx context.Context, slot int, to *ClusterNode) error {
	m, err := c.beginMove(ctx, slot, to)
	if err != nil || m == nil {
		return err
	}
	return m.finish(ctx)
}

// Migration is a slot in migration, held open: its keys are on the
// importing master, the slot map still names the migrating one, so a
// command for one of its keys sent there is answered ASK, until Finish.
type Migration struct {
	c        *Cluster
	slot     int
	from, to *ClusterNode
}

// BeginMove starts migrating slot to node to and moves its keys, but leaves
// the slot map alone: the migration window stays open, with ASK for the
// slot's keys on the old master, until Finish. to must be a master other
// than the slot's.
func (c *Cluster) BeginMove(tb testing.TB, slot int, to *ClusterNode) *Migration {
	tb.Helper()
	m, err := c.beginMove(tb.Context(), slot, to)
	if err == nil && m == nil {
		err = errors.New("the slot is already served by that master")
	}
	if err != nil {
		tb.Fatalf("redistest: begin moving slot %d to %s: %v", slot, to.Addr(), err)
	}
	return m
}

// From is the master the slot migrates from.
func (m *Migration) From() *ClusterNode { return m.from }

// Finish gives the slot to the importing master on every master and waits
// until every node agrees: afterwards the old master answers MOVED.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	if err := m.finish(tb.Context()); err != nil {
		tb.Fatalf("redistest: finish moving slot %d to %s: %v", m.slot, m.to.Addr(), err)
	}
}

func (c *Cluster) beginMove(ctx context.Context, slot int, to *ClusterNode) (*Migration, error) {
	from, err := c.masterOfSlot(ctx, slot)
	if err != nil || from == to {
		return nil, err
	}
	err = to.do(ctx, func(r *redis.Client) error {
		return r.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err()
	})
	if err != nil {
		return nil, fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	err = from.do(ctx, func(r *redis.Client) error {
		if err := r.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.id).Err(); err != nil {
			return fmt.Errorf("SETSLOT MIGRATING: %w", err)
		}
		for {
			keys, err := r.ClusterGetKeysInSlot(ctx, slot, migrateBatch).Result()
			if err != nil || len(keys) == 0 {
				return err
			}
			args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			if err := r.Do(ctx, args...).Err(); err != nil {
				return fmt.Errorf("MIGRATE %d keys: %w", len(keys), err)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return &Migration{c: c, slot: slot, from: from, to: to}, nil
}

func (m *Migration) finish(ctx context.Context) error {
	c, slot, from, to := m.c, m.slot, m.from, m.to
	// The destination first, then the source, as redis-cli does, so no
	// moment has both nodes refuse the slot.
	for _, n := range append([]*ClusterNode{to, from}, c.otherMasters(ctx, to, from)...) {
		err := n.do(ctx, func(r *redis.Client) error {
			return r.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.id).Err()
		})
		if err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", n.Addr(), err)
		}
	}
	return eventually(ctx, "every node sees the slot moved", c.healthy)
}

func (c *Cluster) otherMasters(ctx context.Context, skip ...*ClusterNode) []*ClusterNode {
	var others []*ClusterNode
	_ = c.eachLive(ctx, func(n *ClusterNode, r *redis.Client) error {
		repl, err := r.Info(ctx, "replication").Result()
		if err == nil && infoField(repl, "role") == "master" && n != skip[0] && n != skip[1] {
			others = append(others, n)
		}
		return nil
	})
	return others
}

// Reshard moves nSlots slots from one master to another with
// `redis-cli --cluster reshard`, as an operator would, keys included. Like
// MoveSlot it reports a failure with tb.Errorf, so it may run in a
// goroutine while a scan runs, and returns whether it succeeded.
func (c *Cluster) Reshard(tb testing.TB, from, to *ClusterNode, nSlots int) bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), settleTimeout)
	defer cancel()
	err := runCLI(ctx, c.opts.Node, "--cluster", "reshard", from.Addr(),
		"--cluster-from", from.id, "--cluster-to", to.id,
		"--cluster-slots", strconv.Itoa(nSlots), "--cluster-yes",
		"--cluster-timeout", strconv.Itoa(int((5 * time.Second).Milliseconds())))
	if err == nil {
		err = eventually(ctx, "every node sees the reshard", c.healthy)
	}
	if err != nil {
		tb.Errorf("redistest: reshard %d slots %s -> %s: %v", nSlots, from.Addr(), to.Addr(), err)
		return false
	}
	return true
}
