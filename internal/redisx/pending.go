package redisx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ValidID reports whether id is a complete stream entry id,
// <milliseconds>-<sequence>, the form the guarded scripts accept.
func ValidID(id string) bool { return entryID.MatchString(id) }

// IsGroupMissing reports Redis's NOGROUP answer, which it gives for a
// missing stream as well as a missing group, from a command or a script.
func IsGroupMissing(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "NOGROUP")
}

// EachPendingPage hands fn a consumer's pending entries idle at least
// minIdle, page by page in id order, until there are no more: a PEL has no
// ceiling, so neither has this. An empty consumer pages through the whole
// group.
func EachPendingPage(ctx context.Context, c redis.Cmdable, stream, group, consumer string, minIdle time.Duration, pageSize int64, fn func([]redis.XPendingExt) error) error {
	after := ""
	for {
		page, err := PendingPage(ctx, c, stream, group, consumer, minIdle, after, pageSize)
		if err != nil {
			return fmt.Errorf("XPENDING %s %s: %w", stream, group, err)
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
			after = page[len(page)-1].ID
		}
		if int64(len(page)) < pageSize {
			return nil
		}
	}
}

// PendingEntries looks up each id in the group's PEL in one round trip.
// The result is aligned with ids: nil where an id is not pending. The ids
// must be valid.
func PendingEntries(ctx context.Context, c redis.Cmdable, stream, group string, ids []string) ([]*redis.XPendingExt, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1})
	}
	// A batch that never reached Redis (a refused login) leaves every
	// command empty and without an error of its own: that is a failure,
	// not a list of ids that are not pending.
	if err := exec(ctx, pipe); err != nil {
		return nil, err
	}
	out := make([]*redis.XPendingExt, len(ids))
	for i, id := range ids {
		rows, err := cmds[i].Result()
		if err != nil {
			return nil, fmt.Errorf("XPENDING %s %s %s: %w", stream, group, id, err)
		}
		if len(rows) == 1 {
			out[i] = &rows[0]
		}
	}
	return out, nil
}
