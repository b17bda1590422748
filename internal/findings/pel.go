package findings

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// pageSize is the pending entries read per XPENDING call.
const pageSize = 1000

// entry is one pending entry worth reporting.
type entry struct {
	ID         string
	Consumer   string
	Deliveries int64
	// Gone says the stream entry was deleted: a tombstone.
	Gone bool
}

// pelScan is what a bounded scan of a group's PEL found.
type pelScan struct {
	// hits are the entries delivered at least the threshold, or gone, in
	// id order.
	hits []entry
	// scanned counts the entries read; truncated says the scan stopped at
	// maxScan with entries left.
	scanned   int64
	truncated bool
}

// scanPEL pages through the group's PEL, oldest first, up to maxScan
// entries, keeping those delivered at least minDeliveries times and those
// whose stream entry is gone.
func scanPEL(ctx context.Context, c redis.Cmdable, stream, group string, maxScan, minDeliveries int64) (pelScan, error) {
	var scan pelScan
	start := "-"
	for scan.scanned < maxScan {
		count := min(pageSize, maxScan-scan.scanned)
		page, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: count}).Result()
		if err != nil {
			return pelScan{}, fmt.Errorf("XPENDING %s %s %s + %d: %w", stream, group, start, count, err)
		}
		scan.scanned += int64(len(page))
		gone, err := tombstones(ctx, c, stream, group, page)
		if err != nil {
			return pelScan{}, err
		}
		for _, p := range page {
			g, isGone := gone[p.ID]
			switch {
			case isGone:
				scan.hits = append(scan.hits, g)
			case p.RetryCount >= minDeliveries:
				scan.hits = append(scan.hits, entry{ID: p.ID, Consumer: p.Consumer, Deliveries: p.RetryCount})
			}
		}
		if int64(len(page)) < count {
			return scan, nil
		}
		start = "(" + page[len(page)-1].ID
	}
	more, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: 1}).Result()
	if err != nil {
		return pelScan{}, fmt.Errorf("XPENDING %s %s %s + 1: %w", stream, group, start, err)
	}
	scan.truncated = len(more) > 0
	return scan, nil
}

// tombstones finds the entries of a page whose stream entry is gone. An
// entry that XRANGE no longer returns is a tombstone only if it is still
// pending after that: a worker that acknowledges and then deletes its
// entries would otherwise look like one. Both checks go in one pipeline,
// in order, so one round trip serves the page.
func tombstones(ctx context.Context, c redis.Cmdable, stream, group string, page []redis.XPendingExt) (map[string]entry, error) {
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
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("check %d pending entries of %s %s for deleted stream entries: %w", len(page), stream, group, err)
	}
	var gone map[string]entry
	for i, p := range page {
		still := pending[i].Val()
		if len(ranges[i].Val()) > 0 || len(still) == 0 {
			continue
		}
		if gone == nil {
			gone = make(map[string]entry)
		}
		gone[p.ID] = entry{ID: p.ID, Consumer: still[0].Consumer, Deliveries: still[0].RetryCount, Gone: true}
	}
	return gone, nil
}

// findings groups the scan's hits per consumer: one Bouncing and one
// Tombstone finding at most for each.
func (s pelScan) findings(minDeliveries int64) []Finding {
	type group struct {
		ids []string
		n   int64
		top entry
	}
	groups := map[Kind]map[string]*group{Bouncing: {}, Tombstone: {}}
	add := func(k Kind, e entry) {
		g, ok := groups[k][e.Consumer]
		if !ok {
			g = &group{}
			groups[k][e.Consumer] = g
		}
		g.n++
		if len(g.ids) < MaxIDs {
			g.ids = append(g.ids, e.ID)
		}
		if e.Deliveries > g.top.Deliveries {
			g.top = e
		}
	}
	for _, e := range s.hits {
		if e.Gone {
			add(Tombstone, e)
		}
		if e.Deliveries >= minDeliveries {
			add(Bouncing, e)
		}
	}
	var out []Finding
	for _, k := range []Kind{Bouncing, Tombstone} {
		names := make([]string, 0, len(groups[k]))
		for name := range groups[k] {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			g := groups[k][name]
			d := s.bouncingDetail(g.n, minDeliveries, g.top)
			if k == Tombstone {
				d = s.tombstoneDetail(g.n)
			}
			out = append(out, Finding{Kind: k, Consumer: name, IDs: g.ids, Detail: d})
		}
	}
	return out
}

func (s pelScan) bouncingDetail(n, minDeliveries int64, top entry) string {
	return fmt.Sprintf("%d pending %s delivered at least %d times, the most %d times (%s): a poison entry or a worker that fails on it; "+
		"set maxDeliveries and deadLetterStream to move such entries aside%s", n, plural(n, "entry", "entries"), minDeliveries,
		top.Deliveries, top.ID, s.suffix(n))
}

func (s pelScan) tombstoneDetail(n int64) string {
	return fmt.Sprintf("%d pending %s whose stream entry was deleted (XDEL or XTRIM after delivery): nobody can process them, "+
		"and they count as pending until acknowledged (hygiene acknowledges a ghost's tombstones; a live worker must XACK its own)%s",
		n, plural(n, "entry", "entries"), s.suffix(n))
}

// suffix says what the ids and the counts leave out.
func (s pelScan) suffix(n int64) string {
	out := ""
	if n > MaxIDs {
		out += fmt.Sprintf("; the first %d ids are listed", MaxIDs)
	}
	if s.truncated {
		out += fmt.Sprintf("; only the oldest %d pending entries of the group were scanned (maxScan)", s.scanned)
	}
	return out
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
