package findings

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// scenario builds a group in a fresh Redis and says what Detect must find.
type scenario struct {
	target func(t *testing.T) liveness.Target
	// setup returns the kubernetes annotator (nil without pods) and the
	// findings wanted, in order.
	setup func(t *testing.T, rdb *redis.Client) (annotator, []brief)
	// detail must appear in the first finding's detail.
	detail string
}

func idleTarget(t *testing.T) liveness.Target { return target(t) }

func TestDetectFindsWhatLooksWrongAndChangesNothing(t *testing.T) {
	t.Parallel()
	cases := map[string]scenario{
		"an entry claimed back and forth to its third delivery is bouncing": {target: idleTarget, detail: "the most 3 times",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				ids := addEntries(t, rdb, 3)
				redistest.Read(t, rdb, stream, group, "a", 3)
				claimTo(t, rdb, "b", ids[0])
				claimTo(t, rdb, "a", ids[0])
				claimTo(t, rdb, "b", ids[1]) // a second delivery stays below the threshold
				return nil, []brief{{Bouncing, "a", []string{ids[0]}}}
			}},
		"an entry deleted after delivery is a tombstone": {target: idleTarget, detail: "1 pending entry whose stream entry was deleted",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				ids := addEntries(t, rdb, 3)
				redistest.Read(t, rdb, stream, group, "a", 3)
				require.NoError(t, rdb.XDel(context.Background(), stream, ids[1]).Err())
				return nil, []brief{{Tombstone, "a", []string{ids[1]}}}
			}},
		"a deletion in the unread range makes the lag NULL": {target: idleTarget, detail: "lag as NULL",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				ids := addEntries(t, rdb, 5)
				redistest.Read(t, rdb, stream, group, "a", 2)
				require.NoError(t, rdb.XDel(context.Background(), stream, ids[3]).Err())
				return nil, []brief{{NullLag, "", nil}}
			}},
		"a name the ownerMatch regex does not match has no owner": {detail: "does not match ownerMatch regex:",
			target: func(t *testing.T) liveness.Target {
				return target(t, "ownerMatch", "regex:^(?P<owner>worker-[0-9]+)-")
			},
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				redistest.Read(t, rdb, stream, group, "worker-1-a", 1)
				redistest.Read(t, rdb, stream, group, "stray", 1)
				return nil, []brief{{NoOwner, "stray", nil}}
			}},
		"a name with no heartbeat key for any prefix has no owner": {target: heartbeatTarget, detail: "no heartbeat key hb:{owner} exists",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				require.NoError(t, rdb.Set(context.Background(), "hb:api-0", time.Now().UnixMilli(), 0).Err())
				redistest.Read(t, rdb, stream, group, "api-0-reader", 1)
				redistest.Read(t, rdb, stream, group, "batch-7", 1)
				return nil, []brief{{NoOwner, "batch-7", nil}}
			}},
		"a consumer no pod of the selector is named after has no pod": {target: podTarget, detail: `no pod of selector "app=worker"`,
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				w := podWatcher(t, fake.NewClientset(runningPod("w-0")))
				addEntries(t, rdb, 2)
				redistest.Read(t, rdb, stream, group, "w-0", 1)
				redistest.Read(t, rdb, stream, group, "w-9", 1)
				return w.Annotate, []brief{{NoPod, "w-9", nil}}
			}},
		"a name read after its pod went is shared": {target: podTarget, detail: "read after its pod went",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				client := fake.NewClientset(runningPod("w-1"))
				w := podWatcher(t, client)
				addEntries(t, rdb, 1)
				redistest.Read(t, rdb, stream, group, "w-1", 1)
				require.NoError(t, client.CoreV1().Pods("jobs").Delete(context.Background(), "w-1", metav1.DeleteOptions{}))
				require.Eventually(t, func() bool {
					return w.Observe(workers, []string{"w-1"}).ByName["w-1"].State == liveness.PodGone
				}, 15*time.Second, 5*time.Millisecond)
				time.Sleep(50 * time.Millisecond)
				addEntries(t, rdb, 1)
				redistest.Read(t, rdb, stream, group, "w-1", 1) // another process under the gone pod's name
				return w.Annotate, []brief{{SharedName, "w-1", nil}}
			}},
		"a namespace RBAC refuses is named, and its consumers are not said to have no pod": {target: podTarget,
			detail: "forbidden: the ServiceAccount may not list pods in jobs (check rbac.namespaces)",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				w := forbiddenPodWatcher(t)
				addEntries(t, rdb, 1)
				redistest.Read(t, rdb, stream, group, "w-0", 1)
				return w.Annotate, []brief{{PodsUnobserved, "", nil}}
			}},
		"a heartbeatKey that matches no key in a reading group is reported": {detail: "heartbeatKey beat:{consumer}",
			target: func(t *testing.T) liveness.Target {
				return target(t, "liveness", "heartbeat", "heartbeatKey", "beat:{consumer}")
			},
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				// The workers beat at hb:, the trigger reads beat:.
				require.NoError(t, rdb.Set(context.Background(), "hb:w-0", time.Now().UnixMilli(), 0).Err())
				redistest.Read(t, rdb, stream, group, "w-0", 1)
				redistest.Read(t, rdb, stream, group, "w-1", 1)
				return nil, []brief{{NoHeartbeatRecords, "", nil}}
			}},
		"a heartbeat dated an hour ahead is reported": {target: heartbeatTarget, detail: "dated in the future",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				require.NoError(t, rdb.Set(context.Background(), "hb:api-0", time.Now().Add(time.Hour).UnixMilli(), 0).Err())
				require.NoError(t, rdb.Set(context.Background(), "hb:api-1", time.Now().UnixMilli(), 0).Err())
				redistest.Read(t, rdb, stream, group, "api-0-reader", 1)
				redistest.Read(t, rdb, stream, group, "api-1-reader", 1)
				return nil, []brief{{HeartbeatInFuture, "api-0-reader", nil}}
			}},
		"entries holding a field a reclaim would write are reported, a requeued copy is not": {target: idleTarget,
			detail: "2 pending entries hold their own field pelwarden-deliveries, pelwarden-reason",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				redistest.CreateGroup(t, rdb, stream, group)
				var ids []string
				for _, fields := range [][]any{
					{"job", "a", "pelwarden-deliveries", "1", "pelwarden-carried", "pelwarden-deliveries"}, // pelwarden's own copy
					{"job", "b", "pelwarden-deliveries", "mine"},
					{"job", "c", "pelwarden-reason", "mine"}, // written over only by a dead-letter record
				} {
					id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: fields}).Result()
					require.NoError(t, err)
					ids = append(ids, id)
				}
				redistest.Read(t, rdb, stream, group, "a", 3)
				return nil, []brief{{FieldCollision, "a", ids[1:]}}
			}},
		"a name with more owner candidates than are looked up is reported": {target: heartbeatTarget, detail: "more than 16 owner candidates",
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				long := strings.Repeat("api-", 20) + "0"
				require.NoError(t, rdb.Set(context.Background(), "hb:"+long, time.Now().UnixMilli(), 0).Err())
				require.NoError(t, rdb.Set(context.Background(), "hb:api-1", time.Now().UnixMilli(), 0).Err())
				redistest.Read(t, rdb, stream, group, long, 1)
				redistest.Read(t, rdb, stream, group, "api-1-reader", 1)
				return nil, []brief{{HeartbeatCandidatesCut, long, nil}}
			}},
		"a group read and acknowledged by live workers has no findings": {target: idleTarget,
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 4)
				redistest.Read(t, rdb, stream, group, "w-0", 2)
				done := redistest.Read(t, rdb, stream, group, "w-1", 2)
				require.NoError(t, rdb.XAck(context.Background(), stream, group, done[0]).Err())
				return nil, nil
			}},
		"workers whose pods run have no findings": {target: podTarget,
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				w := podWatcher(t, fake.NewClientset(runningPod("w-0"), runningPod("w-1")))
				addEntries(t, rdb, 2)
				redistest.Read(t, rdb, stream, group, "w-0", 1)
				redistest.Read(t, rdb, stream, group, "w-1", 1)
				return w.Annotate, nil
			}},
		"workers whose owners resolve have no findings": {target: heartbeatTarget,
			setup: func(t *testing.T, rdb *redis.Client) (annotator, []brief) {
				addEntries(t, rdb, 2)
				require.NoError(t, rdb.Set(context.Background(), "hb:api-0", time.Now().UnixMilli(), 0).Err())
				require.NoError(t, rdb.Set(context.Background(), "hb:api-1", time.Now().UnixMilli(), 0).Err())
				redistest.Read(t, rdb, stream, group, "api-0-reader", 1)
				redistest.Read(t, rdb, stream, group, "api-1-reader", 1)
				return nil, nil
			}},
	}
	for name, sc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			tg := sc.target(t)
			annotate, want := sc.setup(t, rdb)
			snap := snapshot(t, srv.Addr(), tg, annotate)
			before := stateOf(t, rdb)

			got, err := Detect(context.Background(), Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: DefaultMaxScan,
				CarryField: "pelwarden-deliveries", DeadLetter: true})
			require.NoError(t, err)
			require.Equal(t, want, briefs(got), "findings: %+v", got)
			if sc.detail != "" {
				require.Contains(t, got[0].Detail, sc.detail)
			}
			require.Equal(t, before, stateOf(t, rdb), "Detect changed nothing in Redis")
		})
	}
}

func heartbeatTarget(t *testing.T) liveness.Target {
	return target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{owner}", "heartbeatMaxAgeSeconds", "60", "ownerMatch", "prefix")
}

func podTarget(t *testing.T) liveness.Target { return kubeTarget(t) }

func TestFindingsComeSortedByKindThenConsumer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tg := target(t, "ownerMatch", "regex:^(?P<owner>worker-[0-9]+)-")
	ids := addEntries(t, rdb, 6)
	redistest.Read(t, rdb, stream, group, "zeta", 2)
	redistest.Read(t, rdb, stream, group, "alpha", 2)
	ctx := context.Background()
	require.NoError(t, rdb.XDel(ctx, stream, ids[0], ids[2], ids[5]).Err())

	got, err := Detect(ctx, Input{Snapshot: snapshot(t, srv.Addr(), tg, nil), Client: rdb, MinDeliveries: 3, MaxScan: DefaultMaxScan})
	require.NoError(t, err)
	require.Equal(t, []brief{
		{NoOwner, "alpha", nil}, {NoOwner, "zeta", nil},
		{Tombstone, "alpha", []string{ids[2]}}, {Tombstone, "zeta", []string{ids[0]}},
		{NullLag, "", nil},
	}, briefs(got))
}

func TestRedisFailureIsAnErrorNotAnEmptyReport(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tg := target(t)
	addEntries(t, rdb, 1)
	redistest.Read(t, rdb, stream, group, "a", 1)
	snap := snapshot(t, srv.Addr(), tg, nil)
	srv.Kill()

	for name, sample := range map[string]time.Duration{"without a sample": 0, "with a sample": 100 * time.Millisecond} {
		got, err := Detect(context.Background(), Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: 10, Sample: sample})
		require.Error(t, err, name)
		require.ErrorContains(t, err, "findings of default/jobs/workers", name)
		require.Nil(t, got, name)
	}
}

func TestDetectRejectsInputItCannotUse(t *testing.T) {
	t.Parallel()
	snap := &liveness.Snapshot{}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	cases := map[string]struct {
		in   Input
		want string
	}{
		"no snapshot":        {Input{Client: rdb, MinDeliveries: 3, MaxScan: 1}, "Snapshot is nil"},
		"no client":          {Input{Snapshot: snap, MinDeliveries: 3, MaxScan: 1}, "Client is nil"},
		"no threshold":       {Input{Snapshot: snap, Client: rdb, MaxScan: 1}, "MinDeliveries must be at least 1, got 0"},
		"no scan bound":      {Input{Snapshot: snap, Client: rdb, MinDeliveries: 3}, "MaxScan must be at least 1, got 0"},
		"a negative sample":  {Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: 1, Sample: -time.Second}, "Sample must be 0"},
		"a negative maxScan": {Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: -5}, "got -5"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Detect(context.Background(), tc.in)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAMissingGroupHasNothingToReport(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	snap := snapshot(t, srv.Addr(), target(t), nil)
	require.True(t, snap.StreamMissing)
	got, err := Detect(context.Background(), Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: 10})
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestKindsKeepTheProtoNumbers(t *testing.T) {
	t.Parallel()
	for _, k := range []Kind{SharedName, NoPod, Bouncing, NoOwner, Tombstone, NullLag, PodsUnobserved, NoHeartbeatRecords, HeartbeatInFuture,
		FieldCollision, HeartbeatCandidatesCut, IdleUndecided, Disruption} {
		require.Equal(t, int32(k), int32(k.Proto()), "kind %s", k)
		require.NotContains(t, k.String(), "kind(")
	}
	tg := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: group}}
	msgs := ToProto(tg, []Finding{{Kind: Tombstone, Consumer: "a", IDs: []string{"1-0"}, Detail: "d", Entries: 101}})
	require.Len(t, msgs, 1)
	require.Equal(t, "default", msgs[0].GetTarget().GetRedis())
	require.Equal(t, []string{"1-0"}, msgs[0].GetIds())
	require.Equal(t, int64(101), msgs[0].GetEntries())
}

func TestAnUndecidedConsumersFindingCountsItsEntries(t *testing.T) {
	t.Parallel()
	tg := target(t)
	snap := &liveness.Snapshot{Target: &tg, Consumers: []liveness.ConsumerView{{Name: "w", Owner: "w", Pending: 8, IdleUndecided: true}}}
	got := fromSnapshot(snap)
	require.Len(t, got, 1)
	require.Equal(t, IdleUndecided, got[0].Kind)
	require.Equal(t, int64(8), got[0].Entries)
	require.Contains(t, got[0].Detail, "holds 8 entries")
}
