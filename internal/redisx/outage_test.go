package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// settled fetches target until two reads in a row agree on since when
// key's node has been readable: the first reads after a dial ask which
// server answers, and until it says, the stretch starts at each read.
func settled(t *testing.T, r *Reader, target liveness.Target, key string, known ...string) liveness.Observation {
	t.Helper()
	var last time.Time
	for range 100 {
		obs, err := r.Fetch(context.Background(), target, known)
		require.NoError(t, err)
		since := obs.Heartbeats[key].ReadableSince
		if since.Equal(last) {
			return obs
		}
		last = since
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the stretch of %s's node never settled", key)
	return liveness.Observation{}
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
	obs := settled(t, r, target, "hb:w-0")
	first := obs.Heartbeats["hb:w-0"].ReadableSince
	require.WithinRange(t, first, before, obs.ReadAt, "pelwarden's first read starts the stretch")
	require.True(t, obs.StreamReadableSince.IsZero(), "pelwarden's own start casts no doubt on Redis's idle times")
	obs, err = r.Fetch(ctx, target, []string{"w-0"})
	require.NoError(t, err)
	require.Equal(t, first, obs.Heartbeats["hb:w-0"].ReadableSince, "an unbroken stretch keeps its start")

	srv.Kill()
	srv.Restart(t)
	restarted := time.Now()
	obs, err = r.Fetch(ctx, target, []string{"w-0"})
	require.NoError(t, err, "the pool redials the restarted server without an error")
	require.True(t, obs.Heartbeats["hb:w-0"].ReadableSince.After(restarted), "a new run_id starts a new stretch")
	require.Equal(t, obs.Heartbeats["hb:w-0"].ReadableSince, obs.StreamReadableSince, "one server holds the stream and the key")

	// A hung server keeps its run_id: only the failed read tells.
	srv.Pause(time.Minute)
	_, err = r.Fetch(ctx, target, []string{"w-0"})
	require.Error(t, err, "the server answers nothing")
	srv.Resume()
	back := time.Now()
	obs = settled(t, r, target, "hb:w-0", "w-0")
	require.True(t, obs.Heartbeats["hb:w-0"].ReadableSince.After(back), "the stretch starts after the outage")
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
	otherSince := settled(t, r, target, "hb:"+other, names...).Heartbeats["hb:"+other].ReadableSince
	// go-redis reads the slot map from any node, replicas too: the replica
	// about to take over has answered long before it serves the slot.
	primary, _ := conns.Get("default")
	require.NoError(t, primary.(*redis.ClusterClient).ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.Ping(ctx).Err()
	}))

	m := c.MasterForKey(t, "hb:"+doomed)
	require.NotNil(t, c.KillMaster(t, m), "the replica takes over")
	tookOver := time.Now()
	// A key on a master that stayed keeps its stretch (once the reads
	// after any new connection of its own have asked who answers).
	deadline := time.Now().Add(20 * time.Second)
	for {
		obs, err := r.Fetch(ctx, target, names)
		if err == nil && obs.Heartbeats["hb:"+doomed].Err == nil && obs.Heartbeats["hb:"+other].ReadableSince.Equal(otherSince) {
			require.True(t, obs.Heartbeats["hb:"+doomed].ReadableSince.After(tookOver.Add(-time.Second)),
				"the key whose slot changed master starts over: %s", obs.Heartbeats["hb:"+doomed].ReadableSince)
			return
		}
		require.True(t, time.Now().Before(deadline), "the key's slot serves again (%v %v), the other keeps its stretch (%s, want %s)",
			err, obs.Heartbeats["hb:"+doomed].Err, obs.Heartbeats["hb:"+other].ReadableSince, otherSince)
		time.Sleep(50 * time.Millisecond)
	}
}
