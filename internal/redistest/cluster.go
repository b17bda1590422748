package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Masters is how many masters share the slots; 0 means 3.
	Masters int
	// ReplicasPerMaster gives each master this many replicas (0 or 1 is
	// what tests need); Failover and KillMaster need at least one.
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it counts as failed and its replica takes over;
	// 0 means 1s, so KillMaster settles in a few seconds.
	NodeTimeout time.Duration
	// Node configures every node (TLS, ACL users, AOF, extra directives).
	// Over TLS the cluster bus and replication speak TLS too, and a node
	// always asks a peer on the bus for a certificate: TLS.ClientCertFile
	// and ClientKeyFile, a client pair, are required and presented there.
	Node Options
}

// Cluster is a Redis Cluster of real redis-server processes on loopback,
// formed and healthy when StartCluster returns and stopped when the test
// ends.
//
// Use it as:
//
//	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
//	rdb := c.Client(t)                         // a *redis.ClusterClient
//	m := c.MasterForKey(t, "{jobs}:stream")    // the node owning a key
//	c.Failover(t, m)                           // CLUSTER FAILOVER on its replica
//	c.MoveSlot(t, c.Slot(t, "{jobs}:stream"), other) // migrate one slot by hand
//	go c.Reshard(t, from, to, 100)             // redis-cli --cluster reshard, under traffic
//
// Nodes keep their port and node id across Kill and Restart: a restarted
// master that lost its slots rejoins as a replica of its successor.
// Hash-tag the keys of one test ("{t1}:stream") to keep them on one slot
// when tests share a cluster.
type Cluster struct {
	opts  ClusterOptions
	nodes []*ClusterNode
}

// ClusterNode is one node of a Cluster: a Server (Addr, Kill, Restart,
// Client) with its cluster node id.
type ClusterNode struct {
	*Server
	id string
}

// ID returns the node's cluster node id.
func (n *ClusterNode) ID() string { return n.id }

// StartCluster starts Masters*(1+ReplicasPerMaster) nodes with
// --cluster-enabled, assigns the slots evenly to the masters, attaches the
// replicas, and waits until every node reports cluster_state:ok, agrees on
// the slot map, and every replica is in sync.
func StartCluster(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	if t := opts.Node.TLS; t != nil && (t.ClientCertFile == "" || t.ClientKeyFile == "") {
		tb.Fatal("redistest: ClusterOptions.Node.TLS needs ClientCertFile and ClientKeyFile: nodes present them to each other on the cluster bus")
	}
	if opts.Masters < 1 || opts.ReplicasPerMaster < 0 {
		tb.Fatalf("redistest: ClusterOptions Masters=%d ReplicasPerMaster=%d: want Masters >= 1 and ReplicasPerMaster >= 0",
			opts.Masters, opts.ReplicasPerMaster)
	}
	node := opts.Node
	node.role = roleClusterNode
	node.Args = append([]string{
		"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
		// A replica counts as online (and clients may read it) once its
		// offset moves; the master's pings move it every second, not 10.
		"--repl-ping-replica-period", "1",
	}, node.Args...)
	all := make([]Options, opts.Masters*(1+opts.ReplicasPerMaster))
	for i := range all {
		all[i] = node
	}
	c := &Cluster{opts: opts}
	for _, s := range startNodes(tb, all, nil) {
		c.nodes = append(c.nodes, &ClusterNode{Server: s})
	}
	if err := c.form(tb.Context()); err != nil {
		tb.Fatalf("%v\n%s", err, c.logTails())
	}
	c.WaitHealthy(tb)
	return c
}

// form gives node i < Masters its share of the slots, has every node meet
// the first, then makes the rest replicas, round-robin over the masters.
func (c *Cluster) form(ctx context.Context) error {
	for _, n := range c.nodes {
		err := n.do(ctx, func(r *redis.Client) error {
			var err error
			n.id, err = r.Do(ctx, "CLUSTER", "MYID").Text()
			return err
		})
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", n.Addr(), err)
		}
	}
	m := c.opts.Masters
	for i, n := range c.nodes[:m] {
		lo, hi := i*slotCount/m, (i+1)*slotCount/m-1
		if err := n.do(ctx, func(r *redis.Client) error { return r.ClusterAddSlotsRange(ctx, lo, hi).Err() }); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, n.Addr(), err)
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if err := n.do(ctx, func(r *redis.Client) error { return r.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(first.port)).Err() }); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET from %s: %w", n.Addr(), err)
		}
	}
	err := eventually(ctx, "every node knows every other", func(ctx context.Context) error {
		return c.eachLive(ctx, func(n *ClusterNode, r *redis.Client) error {
			info, err := r.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if got := infoField(info, "cluster_known_nodes"); got != strconv.Itoa(len(c.nodes)) {
				return fmt.Errorf("%s knows %s nodes, want %d", n.Addr(), got, len(c.nodes))
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for i, n := range c.nodes[m:] {
		master := c.nodes[i%m]
		if err := n.do(ctx, func(r *redis.Client) error { return r.ClusterReplicate(ctx, master.id).Err() }); err != nil {
			return fmt.Errorf("redistest: CLUSTER REPLICATE %s on %s: %w", master.Addr(), n.Addr(), err)
		}
	}
	return nil
}

// logTails is the end of every node's log, for a cluster that would not
// form.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- %s (%s) ---\n%s", n.Addr(), n.dir, n.logTail(0))
	}
	return b.String()
}

// Nodes returns every node, masters first in the order StartCluster made
// them; roles change with failovers, so ask Masters or MasterOfSlot for the
// current ones.
func (c *Cluster) Nodes() []*ClusterNode { return c.nodes }

// Addrs returns every node's address, the seeds a client starts from.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Options returns go-redis cluster options for the cluster (seeds, TLS,
// default user), for callers that want to tune them before NewClusterClient.
// The slot map is reloaded every second: go-redis reloads it on MOVED, but
// after a master dies it would keep dialing the dead node until the next
// periodic reload (60s by default).
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs: c.Addrs(), TLSConfig: c.nodes[0].TLSConfig(),
		ClusterStateReloadInterval: time.Second,
	}
}

// Client returns a go-redis ClusterClient for the cluster, closed when the
// test ends. It follows MOVED and ASK, so it keeps working across
// failovers and resharding.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(c.Options())
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// node returns the node listening on addr, or nil.
func (c *Cluster) node(addr string) *ClusterNode {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// eachLive runs fn against every running node and returns the first error.
func (c *Cluster) eachLive(ctx context.Context, fn func(n *ClusterNode, r *redis.Client) error) error {
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		if err := n.do(ctx, func(r *redis.Client) error { return fn(n, r) }); err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
	}
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all slots assigned, all of them agree on which node serves each slot, and
// every running replica's link to its master is up.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	if err := eventually(tb.Context(), "cluster healthy", c.healthy); err != nil {
		tb.Fatal(err)
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	var want string
	var replicas []string
	err := c.eachLive(ctx, func(n *ClusterNode, r *redis.Client) error {
		info, err := r.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_ok") != strconv.Itoa(slotCount) {
			return fmt.Errorf("cluster_state %s with %s slots ok", infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok"))
		}
		slots, err := slotOwners(ctx, r)
		if err != nil {
			return err
		}
		if got := slotMap(slots); want == "" {
			want = got
		} else if got != want {
			return fmt.Errorf("slot map %s differs from another node's %s", got, want)
		}
		repl, err := r.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if infoField(repl, "role") == "slave" {
			if infoField(repl, "master_link_status") != "up" {
				return fmt.Errorf("replica link to %s:%s is %s", infoField(repl, "master_host"), infoField(repl, "master_port"),
					infoField(repl, "master_link_status"))
			}
			replicas = append(replicas, n.id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A replica shows in CLUSTER SLOTS, where clients learn where to read,
	// only once the others see it online (with a replication offset).
	for _, id := range replicas {
		if !strings.Contains(want, id) {
			return fmt.Errorf("replica %s is not online in the slot map %s", id, want)
		}
	}
	return nil
}

// slotOwner is a range of slots, the master serving it and the replicas
// that are online for it.
type slotOwner struct {
	start, end int
	id, addr   string
	replicas   []string // ids, sorted
}

// slotOwners asks one node, with CLUSTER SLOTS, which master serves which
// slots: the map go-redis's cluster client reads. CLUSTER SHARDS, which
// go-redis would have callers use instead, would not do: after a failover
// some versions list the failed master in its shard beside the promoted
// one, both with the shard's slots.
func slotOwners(ctx context.Context, r *redis.Client) ([]slotOwner, error) {
	slots, err := r.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: CLUSTER SLOTS is what clients follow; see above
	if err != nil {
		return nil, err
	}
	owners := make([]slotOwner, 0, len(slots))
	for _, sl := range slots {
		if len(sl.Nodes) == 0 {
			return nil, fmt.Errorf("slots %d-%d have no node", sl.Start, sl.End)
		}
		var replicas []string
		for _, n := range sl.Nodes[1:] {
			replicas = append(replicas, n.ID)
		}
		slices.Sort(replicas)
		m := sl.Nodes[0]
		owners = append(owners, slotOwner{start: sl.Start, end: sl.End, id: m.ID, addr: m.Addr, replicas: replicas})
	}
	return owners, nil
}

// slotMap renders which master and online replicas serve which range,
// sorted by range, so two nodes' views compare as strings.
func slotMap(owners []slotOwner) string {
	ranges := make([]string, 0, len(owners))
	for _, o := range owners {
		ranges = append(ranges, fmt.Sprintf("%05d-%05d:%s+%s", o.start, o.end, o.id, strings.Join(o.replicas, ",")))
	}
	slices.Sort(ranges)
	return strings.Join(ranges, " ")
}
