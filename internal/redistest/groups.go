package redistest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hold creates group on stream (at "$", with the stream) unless it exists,
// adds n entries whose field job is prefix0 … prefix<n-1>, and has
// consumer read n new entries: those, when nothing else was waiting. It
// returns the ids consumer read, in order.
func Hold(tb testing.TB, rdb redis.Cmdable, stream, group, consumer, prefix string, n int) []string {
	tb.Helper()
	CreateGroup(tb, rdb, stream, group)
	AddJobs(tb, rdb, stream, prefix, n)
	return Read(tb, rdb, stream, group, consumer, n)
}

// CreateGroup creates group on stream at "$", with the stream, unless the
// group exists.
func CreateGroup(tb testing.TB, rdb redis.Cmdable, stream, group string) {
	tb.Helper()
	if err := rdb.XGroupCreateMkStream(context.Background(), stream, group, "$").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		tb.Fatalf("create group %s on %s: %v", group, stream, err)
	}
}

// AddJobs adds n entries whose field job is prefix0 … prefix<n-1>, in one
// round trip, and returns their ids.
func AddJobs(tb testing.TB, rdb redis.Cmdable, stream, prefix string, n int) []string {
	tb.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, n)
	for i := range n {
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", prefix + strconv.Itoa(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("add %d entries to %s: %v", n, stream, err)
	}
	ids := make([]string, n)
	for i, c := range cmds {
		ids[i] = c.Val()
	}
	return ids
}

// Read has consumer read n new entries of stream in group, leaving them
// pending, and fails unless it got exactly n. It returns their ids.
func Read(tb testing.TB, rdb redis.Cmdable, stream, group, consumer string, n int) []string {
	tb.Helper()
	res, err := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		tb.Fatalf("%s reads %d entries of %s: %v", consumer, n, stream, err)
	}
	ids := make([]string, 0, n)
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	if len(ids) != n {
		tb.Fatalf("%s read %d entries of %s, want %d", consumer, len(ids), stream, n)
	}
	return ids
}

// Age sets how long ids have been idle in group's pending list, as XCLAIM
// … IDLE does, keeping their owner and delivery count. A test that tells
// old entries from fresh ones ages the old ones by far more than its
// threshold, so a slow machine cannot make a fresh entry look old.
func Age(tb testing.TB, rdb interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}, stream, group, consumer string, idle time.Duration, ids ...string) {
	tb.Helper()
	args := []any{"XCLAIM", stream, group, consumer, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
	got, err := rdb.Do(context.Background(), args...).StringSlice()
	if err != nil || len(got) != len(ids) {
		tb.Fatalf("age %d entries of %s by %s: %v (claimed %d)", len(ids), consumer, idle, err, len(got))
	}
}
