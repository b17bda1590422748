package redistest

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Hold creates group on stream (at "$", with the stream) unless it exists,
// adds n entries whose field job is prefix0 … prefix<n-1>, and has
// consumer read n new entries: those, when nothing else was waiting. It
// returns the ids consumer read, in order.
func Hold(tb testing.TB, rdb redis.Cmdable, stream, group, consumer, prefix string, n int) []string {
	tb.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		tb.Fatalf("create group %s on %s: %v", group, stream, err)
	}
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", prefix + strconv.Itoa(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatalf("add %d entries to %s: %v", n, stream, err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
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
