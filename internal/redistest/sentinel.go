package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions configures StartSentinel.
type SentinelOptions struct {
	// MasterName is the name the sentinels monitor the master under; ""
	// means "pelwarden".
	MasterName string
	// Replicas is how many replicas follow the master; 0 means 1.
	Replicas int
	// Sentinels is how many sentinels watch, with a majority quorum; 0
	// means 3.
	Sentinels int
	// DownAfter is down-after-milliseconds: how long the master may not
	// answer before a sentinel calls it down; 0 means 30s, Redis's own
	// default. A test that kills the master sets it short; one that does
	// not keeps the default, so a machine too loaded to answer a PING for
	// a second does not fail the master over under it.
	DownAfter time.Duration
	// Node configures the master and replicas (TLS, ACL users, AOF, extra
	// directives). Over TLS, replication and the sentinels speak TLS too.
	Node Options
	// SentinelUsers adds ACL users to the sentinels, each a rule as the
	// `user` directive takes it. A sentinel knows only its own commands,
	// so Node.Users are not given to it.
	SentinelUsers []string
}

// Sentinel is a master, its replicas and the sentinels watching them, all
// real redis-server processes on loopback, agreed and in sync when
// StartSentinel returns and stopped when the test ends.
//
// Use it as:
//
//	s := redistest.StartSentinel(t, redistest.SentinelOptions{})
//	rdb := s.Client(t)         // redis.NewFailoverClient over the sentinels
//	m := s.Failover(t)         // SENTINEL FAILOVER; returns the new master
//	m = s.KillMaster(t)        // SIGKILL the master; sentinels elect another
type Sentinel struct {
	opts      SentinelOptions
	nodes     []*Server // master and replicas, in start order
	sentinels []*Server
}

// StartSentinel starts a master, opts.Replicas replicas of it and
// opts.Sentinels sentinels, and waits until every sentinel names the master,
// knows the other sentinels and the replicas, and every replica is in sync.
func StartSentinel(tb testing.TB, opts SentinelOptions) *Sentinel {
	tb.Helper()
	if opts.MasterName == "" {
		opts.MasterName = "pelwarden"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = 30 * time.Second
	}
	if opts.Replicas < 0 || opts.Sentinels < 1 {
		tb.Fatalf("redistest: SentinelOptions Replicas=%d Sentinels=%d: want Replicas >= 0 and Sentinels >= 1", opts.Replicas, opts.Sentinels)
	}
	s := &Sentinel{opts: opts}
	data := make([]Options, 1+opts.Replicas)
	for i := range data {
		data[i] = opts.Node
	}
	s.nodes = startNodes(tb, data, nil)
	ctx := tb.Context()
	master := s.nodes[0]
	for _, r := range s.nodes[1:] {
		if err := r.do(ctx, func(c *redis.Client) error { return c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.port)).Err() }); err != nil {
			tb.Fatalf("redistest: REPLICAOF on %s: %v", r.Addr(), err)
		}
	}
	sentinel := Options{TLS: opts.Node.TLS, Users: opts.SentinelUsers, role: roleSentinel}
	all := make([]Options, opts.Sentinels)
	for i := range all {
		all[i] = sentinel
	}
	s.sentinels = startNodes(tb, all, func(_ int, sn *Server) error { return s.writeConf(sn, master) })
	if err := eventually(ctx, "sentinels agree on "+master.Addr(), s.agreed); err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *Server) sentinelConfPath() string { return filepath.Join(s.dir, "sentinel.conf") }

// writeConf writes a sentinel's config file: it must be writable, since a
// sentinel records what it learns (peers, replicas, epochs) there.
func (s *Sentinel) writeConf(sn, master *Server) error {
	name := s.opts.MasterName
	conf := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s %[4]d
sentinel failover-timeout %[1]s %[5]d
sentinel parallel-syncs %[1]s 1
`, name, master.port, s.opts.Sentinels/2+1, s.opts.DownAfter.Milliseconds(), (5 * time.Second).Milliseconds())
	if err := os.WriteFile(sn.sentinelConfPath(), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("write sentinel config: %w", err)
	}
	return nil
}

// MasterName returns the name the sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return s.opts.MasterName }

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes.
func (s *Sentinel) Sentinels() []*Server { return s.sentinels }

// Nodes returns the master and replicas in start order; roles change with
// failovers, so ask Master for the current one.
func (s *Sentinel) Nodes() []*Server { return s.nodes }

// FailoverOptions returns go-redis failover options for the setup (master
// name, sentinels, TLS, default user), to tune before NewFailoverClient.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName: s.opts.MasterName, SentinelAddrs: s.SentinelAddrs(),
		TLSConfig: s.nodes[0].TLSConfig(),
	}
}

// Client returns a go-redis FailoverClient that finds the master through the
// sentinels and follows it across failovers; closed when the test ends.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the node every sentinel names as master now.
func (s *Sentinel) Master(tb testing.TB) *Server {
	tb.Helper()
	var m *Server
	err := eventually(tb.Context(), "sentinels agree on a master", func(ctx context.Context) error {
		var err error
		m, err = s.agreedMaster(ctx)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Failover runs SENTINEL FAILOVER, which promotes a replica without asking
// the other sentinels, waits until every sentinel names the new master and
// every replica follows it, and returns the new master.
func (s *Sentinel) Failover(tb testing.TB) *Server {
	tb.Helper()
	ctx := tb.Context()
	old := s.Master(tb)
	err := s.sentinels[0].do(ctx, func(c *redis.Client) error {
		return c.Do(ctx, "SENTINEL", "FAILOVER", s.opts.MasterName).Err()
	})
	if err != nil {
		tb.Fatalf("redistest: SENTINEL FAILOVER %s: %v", s.opts.MasterName, err)
	}
	return s.waitNewMaster(tb, old)
}

// KillMaster kills the master with SIGKILL, as a crash would, waits until
// the sentinels have elected a replica and every one names it, and returns
// the new master. The old master, once Restarted, is turned into a replica
// by the sentinels.
func (s *Sentinel) KillMaster(tb testing.TB) *Server {
	tb.Helper()
	old := s.Master(tb)
	old.Kill()
	return s.waitNewMaster(tb, old)
}

func (s *Sentinel) waitNewMaster(tb testing.TB, old *Server) *Server {
	tb.Helper()
	err := eventually(tb.Context(), "a master other than "+old.Addr(), func(ctx context.Context) error {
		m, err := s.agreedMaster(ctx)
		if err == nil && m == old {
			err = errors.New("sentinels still name the old master")
		}
		if err == nil {
			err = s.agreed(ctx)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s.Master(tb)
}
