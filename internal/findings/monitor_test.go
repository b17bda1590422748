package findings

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// oneConn is a client with exactly one connection: one "ip:port" in MONITOR.
func oneConn(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 0})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keepReading has c try XREADGROUP as consumer until stop closes.
func keepReading(wg *sync.WaitGroup, stop <-chan struct{}, c *redis.Client, consumer string) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			err := c.XReadGroup(context.Background(), &redis.XReadGroupArgs{
				Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: 1, Block: -1,
			}).Err()
			if err != nil && !errors.Is(err, redis.Nil) {
				panic(err)
			}
		}
	})
}

var claimInScript = redis.NewScript(`return redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')`)

func TestMonitorReportsANameReadFromTwoConnectionsOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ids := addEntries(t, rdb, 4)
	snap := snapshot(t, srv.Addr(), target(t), nil)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	keepReading(&wg, stop, oneConn(t, srv.Addr()), "shared")
	keepReading(&wg, stop, oneConn(t, srv.Addr()), "shared")
	keepReading(&wg, stop, oneConn(t, srv.Addr()), "solo")
	// A reclaimer's XCLAIM inside a script names "solo" from another
	// connection; MONITOR shows it as "lua", not as a second reader.
	scripted := oneConn(t, srv.Addr())
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = claimInScript.Run(context.Background(), scripted, []string{stream}, group, "solo", ids[0]).Err()
		}
	})

	got, err := Detect(context.Background(), Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: 100, Sample: 500 * time.Millisecond})
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	shared := ofKind(got, SharedName)
	require.Equal(t, []brief{{SharedName, "shared", nil}}, briefs(shared), "findings: %+v", got)
	require.Contains(t, shared[0].Detail, "used from 2 connections")
	require.Contains(t, shared[0].Detail, "XREADGROUP")
	require.Contains(t, shared[0].Detail, "even when the connections belong to one process")
}

func TestMonitorSampleAuthenticatesAsTheClientAndReportsRefusal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "ops", "on", ">ops-pw", "~*", "+@all").Err())
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "+@all", "-monitor").Err())
	addEntries(t, admin, 1)
	snap := snapshot(t, srv.Addr(), target(t), nil)

	cases := map[string]struct {
		user, pass string
		err        string
	}{
		"a user allowed to monitor":         {user: "ops", pass: "ops-pw"},
		"a user denied monitor":             {user: "reader", pass: "reader-pw", err: "NOPERM"},
		"the default user without password": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: tc.user, Password: tc.pass})
			t.Cleanup(func() { _ = c.Close() })
			_, err := Detect(ctx, Input{Snapshot: snap, Client: c, MinDeliveries: 3, MaxScan: 10, Sample: 50 * time.Millisecond})
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "MONITOR on "+srv.Addr())
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func TestMonitorSampleEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	addEntries(t, rdb, 1)
	snap := snapshot(t, srv.Addr(), target(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Detect(ctx, Input{Snapshot: snap, Client: rdb, MinDeliveries: 3, MaxScan: 10, Sample: time.Minute})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 30*time.Second, "a canceled sample does not run its full minute")
}
