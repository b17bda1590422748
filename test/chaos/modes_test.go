package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// retried is how the suite's own client rides out restarts and failovers.
const (
	retries                  = 20
	minBackoff, maxBackoffMs = 50 * time.Millisecond, 200
)

// multiNodeKeys keep the stream, its ledger and pelwarden's lease in one
// slot and put the dead-letter stream in another one.
var multiNodeKeys = keys{stream: "{jobs}", dlq: "jobs:dead", ledger: "{jobs}:ledger"}

// durable is the WAIT the multi-node runs ask of pelwarden's writes.
const durable = "    waitReplicas: 1\n    waitTimeout: 500ms\n"

// standalone is one server with AOF: pelwarden is SIGKILLed mid-requeue,
// then Redis restarts.
func standalone(t *testing.T) *setup {
	srv := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--appendfsync", "always"}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: retries, MinRetryBackoff: minBackoff, MaxRetryBackoff: maxBackoffMs * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s := &setup{keys: keys{stream: "jobs", dlq: "jobs:dead", ledger: "ledger"}, sz: chaosSize(), rdb: rdb,
		conn: fmt.Sprintf("    addr: %s\n", srv.Addr()), worker: []string{"--redis", srv.Addr()}}
	redistest.CreateGroup(t, rdb, s.stream, group)
	s.disrupt = func(t *testing.T, f *fleet) {
		require.True(t, midRequeue(t, s, killLeader(t, f, s)), "pelwarden was SIGKILLed while a large requeue was under way")
		time.Sleep(s.sz.produceFor / 10)
		t.Log("restarting redis")
		srv.Stop()
		srv.Restart(t)
		time.Sleep(s.sz.produceFor / 10)
	}
	return s
}

// cluster is 3 masters with a replica each: the stream's slot migrates to
// another master while a large requeue runs, then that master fails over.
func cluster(t *testing.T) *setup {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	opts := cl.Options()
	opts.MaxRetries, opts.MinRetryBackoff, opts.MaxRetryBackoff = retries, minBackoff, maxBackoffMs*time.Millisecond
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s := &setup{keys: multiNodeKeys, sz: multiNodeSize(), rdb: rdb,
		conn:   fmt.Sprintf("    mode: cluster\n    cluster:\n      addrs: [%s]\n", strings.Join(cl.Addrs(), ", ")) + durable,
		worker: []string{"--redis-mode", "cluster", "--redis-addrs", strings.Join(cl.Addrs(), ",")}}
	require.False(t, redisx.SameSlot(s.stream, s.dlq), "the dead-letter path crosses slots")
	redistest.CreateGroup(t, rdb, s.stream, group)
	s.disrupt = func(t *testing.T, f *fleet) {
		slot := cl.Slot(t, s.stream)
		moved := midRequeue(t, s, func(left, held int64) {
			from := cl.MasterForKey(t, s.stream)
			to := otherMaster(t, cl, from, cl.MasterForKey(t, s.dlq))
			t.Logf("moving slot %d from %s to %s with %d of %d hoarded entries pending", slot, from.Addr(), to.Addr(), left, held)
			require.True(t, cl.MoveSlot(t, slot, to))
		})
		require.True(t, moved, "the stream's slot migrated while a large requeue was under way")
		time.Sleep(s.sz.produceFor / 10)
		master := cl.MasterForKey(t, s.stream)
		t.Logf("failing over %s, the master of %s", master.Addr(), s.stream)
		cl.Failover(t, master)
		time.Sleep(s.sz.produceFor / 10)
	}
	return s
}

// otherMaster is a master that is none of not, or the first that is not
// the first of not when there is no such.
func otherMaster(t *testing.T, cl *redistest.Cluster, not ...*redistest.ClusterNode) *redistest.ClusterNode {
	t.Helper()
	masters := cl.Masters(t)
	for _, m := range masters {
		if m != not[0] && (len(not) < 2 || m != not[1]) {
			return m
		}
	}
	for _, m := range masters {
		if m != not[0] {
			return m
		}
	}
	t.Fatal("no other master")
	return nil
}

// sentinel is a master and a replica under 3 sentinels: pelwarden is
// SIGKILLed mid-requeue, then the sentinels fail the master over.
func sentinel(t *testing.T) *setup {
	sn := redistest.StartSentinel(t, redistest.SentinelOptions{})
	opts := sn.FailoverOptions()
	opts.MaxRetries, opts.MinRetryBackoff, opts.MaxRetryBackoff = retries, minBackoff, maxBackoffMs*time.Millisecond
	rdb := redis.NewFailoverClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	addrs := strings.Join(sn.SentinelAddrs(), ",")
	s := &setup{keys: multiNodeKeys, sz: multiNodeSize(), rdb: rdb,
		conn: fmt.Sprintf("    mode: sentinel\n    sentinel:\n      masterName: %s\n      addrs: [%s]\n",
			sn.MasterName(), strings.Join(sn.SentinelAddrs(), ", ")) + durable,
		worker:       []string{"--redis-mode", "sentinel", "--redis-addrs", addrs, "--sentinel-master", sn.MasterName()},
		producerWait: true, failover: true}
	redistest.CreateGroup(t, rdb, s.stream, group)
	s.disrupt = func(t *testing.T, f *fleet) {
		require.True(t, midRequeue(t, s, killLeader(t, f, s)), "pelwarden was SIGKILLed while a large requeue was under way")
		time.Sleep(s.sz.produceFor / 10)
		t.Log("sentinel failover")
		m := sn.Failover(t)
		t.Logf("the sentinels promoted %s", m.Addr())
		time.Sleep(s.sz.produceFor / 10)
	}
	return s
}

// killLeader SIGKILLs the pelwarden that holds the lease and starts it
// again.
func killLeader(t *testing.T, f *fleet, s *setup) func(left, held int64) {
	return func(left, held int64) {
		var leader string
		require.Eventually(t, func() bool {
			var err error
			var value string
			value, err = s.rdb.Get(context.Background(), s.lease()).Result()
			leader = redisx.LeaseIdentity(value)
			return err == nil
		}, 10*time.Second, time.Millisecond, "a pelwarden holds the lease")
		f.pelwardenProc(leader).Kill()
		t.Logf("SIGKILLed pelwarden %s with %d of %d hoarded entries still pending", leader, left, held)
		time.Sleep(300 * time.Millisecond)
		f.startPelwarden(leader)
	}
}
