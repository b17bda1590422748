package redisx

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// fetch reads target once: a new connection's server is known before any
// read runs on it, so the first read already says since when key's node
// has been readable.
func fetch(t *testing.T, r *Reader, target liveness.Target, known ...string) liveness.Observation {
	t.Helper()
	obs, err := r.Fetch(context.Background(), target, known)
	require.NoError(t, err)
	return obs
}

func heartbeatTarget(stream string) liveness.Target {
	return liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: "workers"},
		Spec: liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: time.Second}}
}

// TestFetchSaysSinceWhenEachKeysNodeIsReadable: a first read starts the
// stretch (for heartbeats; idle times are Redis's own count); reads go on
// without moving it; a restart between two reads, which no command saw
// fail, starts a new one (a new run_id), and so does a read that failed
// while the server hung.
func TestFetchSaysSinceWhenEachKeysNodeIsReadable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	require.NoError(t, rdb.XGroupCreateConsumer(ctx, "jobs", "workers", "w-0").Err())
	cfg := config.DefaultRedis("default", srv.Addr())
	cfg.ReadTimeout = 300 * time.Millisecond
	conns, err := Open([]config.Redis{cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	r := &Reader{Conns: conns, LagEstimateCap: 10}
	target := heartbeatTarget("jobs")

	before := time.Now()
	obs := fetch(t, r, target)
	first := obs.Heartbeats["hb:w-0"].Health().ReadableSince
	require.WithinRange(t, first, before, obs.ReadAt, "pelwarden's first read starts the stretch")
	require.True(t, obs.StreamReadableSince.IsZero(), "pelwarden's own start casts no doubt on Redis's idle times")
	obs, err = r.Fetch(ctx, target, []string{"w-0"})
	require.NoError(t, err)
	require.Equal(t, first, obs.Heartbeats["hb:w-0"].Health().ReadableSince, "an unbroken stretch keeps its start")

	srv.Kill()
	srv.Restart(t)
	restarted := time.Now()
	obs, err = r.Fetch(ctx, target, []string{"w-0"})
	require.NoError(t, err, "the pool redials the restarted server without an error")
	require.True(t, obs.Heartbeats["hb:w-0"].Health().ReadableSince.After(restarted), "a new run_id starts a new stretch")
	require.Equal(t, obs.Heartbeats["hb:w-0"].Health().ReadableSince, obs.StreamReadableSince, "one server holds the stream and the key")

	// A hung server keeps its run_id: only the failed read tells.
	srv.Pause(time.Minute)
	_, err = r.Fetch(ctx, target, []string{"w-0"})
	require.Error(t, err, "the server answers nothing")
	srv.Resume()
	back := time.Now()
	obs = fetch(t, r, target, "w-0")
	require.True(t, obs.Heartbeats["hb:w-0"].Health().ReadableSince.After(back), "the stretch starts after the outage")
	require.True(t, obs.StreamReadableSince.After(back), "a break pelwarden saw casts doubt on idle times too")
}

// TestAClusterSlotWhoseMasterChangedStartsAStretchOfItsOwn kills the
// master of one heartbeat key's slot: once its replica serves, that key's
// stretch starts at the takeover, while a key on another master keeps its
// own.
func TestAClusterSlotWhoseMasterChangedStartsAStretchOfItsOwn(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	ctx := context.Background()
	const stream = "{s}:jobs"
	redistest.CreateGroup(t, rdb, stream, "workers")
	names := []string{}
	// Two consumers whose keys sit on masters other than the stream's.
	streamMaster := c.MasterForKey(t, stream)
	var doomed, other string
	for i := 0; doomed == "" || other == ""; i++ {
		name := "w-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		m := c.MasterForKey(t, "hb:"+name)
		switch {
		case m == streamMaster:
			continue
		case doomed == "":
			doomed = name
		case m.Addr() != c.MasterForKey(t, "hb:"+doomed).Addr() && other == "":
			other = name
		default:
			continue
		}
		names = append(names, name)
		require.NoError(t, rdb.XGroupCreateConsumer(ctx, stream, "workers", name).Err())
	}
	cfg := config.DefaultRedis("default", "")
	cfg.Mode, cfg.Addr, cfg.Cluster = config.RedisCluster, "", config.RedisClusterConfig{Addrs: c.Addrs()}
	conns, err := Open([]config.Redis{cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	r := &Reader{Conns: conns, LagEstimateCap: 10}
	target := heartbeatTarget(stream)
	otherSince := fetch(t, r, target, names...).Heartbeats["hb:"+other].Health().ReadableSince
	// go-redis reads the slot map from any node, replicas too: the replica
	// about to take over has answered long before it serves the slot.
	primary, _ := conns.Get("default")
	require.NoError(t, primary.(*redis.ClusterClient).ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.Ping(ctx).Err()
	}))

	m := c.MasterForKey(t, "hb:"+doomed)
	require.NotNil(t, c.KillMaster(t, m), "the replica takes over")
	tookOver := time.Now()
	// A key on a master that stayed keeps its stretch.
	deadline := time.Now().Add(20 * time.Second)
	for {
		obs, err := r.Fetch(ctx, target, names)
		if err == nil && obs.Heartbeats["hb:"+doomed].Err == nil && obs.Heartbeats["hb:"+other].Health().ReadableSince.Equal(otherSince) {
			require.True(t, obs.Heartbeats["hb:"+doomed].Health().ReadableSince.After(tookOver.Add(-time.Second)),
				"the key whose slot changed master starts over: %s", obs.Heartbeats["hb:"+doomed].Health().ReadableSince)
			return
		}
		require.True(t, time.Now().Before(deadline), "the key's slot serves again (%v %v), the other keeps its stretch (%s, want %s)",
			err, obs.Heartbeats["hb:"+doomed].Err, obs.Heartbeats["hb:"+other].Health().ReadableSince, otherSince)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEachNewConnectionIsAskedOnceBeforeItsFirstRead: many first reads at
// once make the pool dial several connections. Each asks INFO server once,
// on itself, before any read runs on it: no other connection is dialed to
// ask, no read meets a connection whose server is not yet known, so none
// doubts the idle times (pelwarden's own start is no break) and all agree
// when the stretch began. Through sentinels, whose connections a
// FailoverClient dials with the same OnConnect, a sentinel is never taken
// for the master.
func TestEachNewConnectionIsAskedOnceBeforeItsFirstRead(t *testing.T) {
	t.Parallel()
	modes := map[string]func(t *testing.T) (config.Redis, *redis.Client){
		"standalone": func(t *testing.T) (config.Redis, *redis.Client) {
			srv := redistest.Start(t)
			return config.DefaultRedis("default", srv.Addr()), srv.Client(t)
		},
		"sentinel": func(t *testing.T) (config.Redis, *redis.Client) {
			s := redistest.StartSentinel(t, redistest.SentinelOptions{})
			r := config.DefaultRedis("default", "")
			r.Mode = config.RedisSentinel
			r.Sentinel = config.RedisSentinelConfig{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()}
			return r, s.Master(t).Client(t)
		},
	}
	for name, start := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, rdb := start(t)
			ctx := context.Background()
			redistest.CreateGroup(t, rdb, "jobs", "workers")
			require.NoError(t, rdb.XGroupCreateConsumer(ctx, "jobs", "workers", "w-0").Err())
			conns, err := Open([]config.Redis{cfg})
			require.NoError(t, err)
			t.Cleanup(func() { _ = conns.Close() })
			// Every connection the pool dials, those a read that timed out
			// on a loaded machine closed too: CLIENT LIST has only the
			// ones still open.
			var dials atomic.Int64
			c, _ := conns.Get(cfg.Name)
			c.AddHook(dialCounter{&dials})
			r := &Reader{Conns: conns, LagEstimateCap: 10}
			target := heartbeatTarget("jobs")
			before := redistest.CommandCalls(t, rdb)

			const reads = 16
			began := time.Now()
			obs := make([]liveness.Observation, reads)
			var wg sync.WaitGroup
			for i := range obs {
				wg.Go(func() { obs[i] = fetch(t, r, target, "w-0") })
			}
			wg.Wait()

			start := obs[0].Heartbeats["hb:w-0"].Health().ReadableSince
			for i, o := range obs {
				require.True(t, o.StreamReadableSince.IsZero(), "read %d: a new connection casts no doubt on idle times", i)
				require.Equal(t, start, o.Heartbeats["hb:w-0"].Health().ReadableSince, "read %d: one stretch, begun at the first connection", i)
			}
			// The first reading is an INFO; so is each sample of the
			// node's writes (writes.go), one per sampleEvery at most.
			infos := redistest.CommandCalls(t, rdb)["info"] - before["info"] - 1
			dialed := dials.Load()
			require.Positive(t, dialed)
			samples := infos - dialed
			require.GreaterOrEqual(t, samples, int64(1), "the reads of heartbeats sample the node's writes")
			require.LessOrEqual(t, samples, 1+int64(time.Since(began)/sampleEvery), "one INFO server per connection pelwarden dialed, "+
				"and a sample of its writes every sampleEvery at most")
		})
	}
}

// dialCounter counts the connections a client dialed.
type dialCounter struct{ n *atomic.Int64 }

func (d dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil {
			d.n.Add(1)
		}
		return cn, err
	}
}

func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
