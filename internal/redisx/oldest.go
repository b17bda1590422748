package redisx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// OldestPending returns, for each consumer, the first entry of its PEL in
// id order with its idle time, nil where it holds none, in one round
// trip. Entries delivered by XREADGROUP come in id order, so this is the
// consumer's longest-idle entry unless some were claimed to it or read
// again from its history: the hygiene loop's next look at the consumer
// is due when that entry turns stale.
func OldestPending(ctx context.Context, c redis.Cmdable, stream, group string, consumers []string) ([]*PendingEntry, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(consumers))
	for i, name := range consumers {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 1, Consumer: name})
	}
	if err := exec(ctx, pipe); err != nil {
		return nil, err
	}
	out := make([]*PendingEntry, len(consumers))
	for i := range consumers {
		rows, err := cmds[i].Result()
		if err != nil {
			return nil, fmt.Errorf("XPENDING %s %s - + 1 <consumer>: %w", stream, group, err)
		}
		if len(rows) == 1 {
			e := pendingEntry(rows[0])
			out[i] = &e
		}
	}
	return out, nil
}
