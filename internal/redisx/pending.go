package redisx

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PendingEntry is one row of a group's PEL.
type PendingEntry struct {
	ID       string
	Consumer string
	Idle     time.Duration
	// Deliveries is the delivery count Redis keeps for the entry.
	Deliveries int64
}

// ValidID reports whether id is a complete stream entry id,
// <milliseconds>-<sequence>, each part a uint64: the form the guarded
// scripts accept.
func ValidID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, errMs := strconv.ParseUint(ms, 10, 64)
	_, errSeq := strconv.ParseUint(seq, 10, 64)
	return errMs == nil && errSeq == nil
}

// PendingPage lists up to count of a consumer's pending entries idle at
// least minIdle with ids above after ("" starts at the beginning). An empty
// consumer lists the whole group's.
func PendingPage(ctx context.Context, c redis.Cmdable, stream, group, consumer string, minIdle time.Duration, after string, count int64) ([]PendingEntry, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	rows, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: group, Idle: minIdle, Start: start, End: "+", Count: count, Consumer: consumer,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s %s + %d: %w", stream, group, start, count, err)
	}
	out := make([]PendingEntry, len(rows))
	for i, r := range rows {
		out[i] = pendingEntry(r)
	}
	return out, nil
}

func pendingEntry(r redis.XPendingExt) PendingEntry {
	return PendingEntry{ID: r.ID, Consumer: r.Consumer, Idle: r.Idle, Deliveries: r.RetryCount}
}

// PendingEntries looks up each id in the group's PEL in one round trip.
// The result is aligned with ids: nil where an id is not pending. The ids
// must be valid.
func PendingEntries(ctx context.Context, c redis.Cmdable, stream, group string, ids []string) ([]*PendingEntry, error) {
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
	out := make([]*PendingEntry, len(ids))
	for i, id := range ids {
		rows, err := cmds[i].Result()
		if err != nil {
			return nil, fmt.Errorf("XPENDING %s %s %s: %w", stream, group, id, err)
		}
		if len(rows) == 1 {
			e := pendingEntry(rows[0])
			out[i] = &e
		}
	}
	return out, nil
}

// Tombstones returns the entries of page whose stream entry is gone, by id,
// as they are pending now. An entry that XRANGE no longer returns is a
// tombstone only if it is still pending after that: a worker that
// acknowledges and then deletes its entries would otherwise look like one.
// Both checks go in one pipeline, in order, so one round trip serves the
// page.
func Tombstones(ctx context.Context, c redis.Cmdable, stream, group string, page []PendingEntry) (map[string]PendingEntry, error) {
	if len(page) == 0 {
		return nil, nil
	}
	pipe := c.Pipeline()
	ranges := make([]*redis.XMessageSliceCmd, len(page))
	pending := make([]*redis.XPendingExtCmd, len(page))
	for i, p := range page {
		ranges[i] = pipe.XRangeN(ctx, stream, p.ID, p.ID, 1)
		pending[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: p.ID, End: p.ID, Count: 1})
	}
	if err := exec(ctx, pipe); err != nil {
		return nil, fmt.Errorf("check %d pending entries of %s %s for deleted stream entries: %w", len(page), stream, group, err)
	}
	var gone map[string]PendingEntry
	for i, p := range page {
		still := pending[i].Val()
		if len(ranges[i].Val()) > 0 || len(still) == 0 {
			continue
		}
		if gone == nil {
			gone = make(map[string]PendingEntry)
		}
		gone[p.ID] = pendingEntry(still[0])
	}
	return gone, nil
}
