package findings

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/redisx"
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
	// Clash is the field of the job a reclaim would write over.
	Clash string
}

// writes is what a reclaim of the target would write into an entry.
type writes struct {
	carry      string
	deadLetter bool
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
func scanPEL(ctx context.Context, c redis.Cmdable, stream, group string, maxScan, minDeliveries int64, w writes) (pelScan, error) {
	var scan pelScan
	after := ""
	for scan.scanned < maxScan {
		count := min(pageSize, maxScan-scan.scanned)
		page, err := redisx.PendingPage(ctx, c, stream, group, "", 0, after, count)
		if err != nil {
			return pelScan{}, err
		}
		scan.scanned += int64(len(page))
		gone, err := redisx.Tombstones(ctx, c, stream, group, page)
		if err != nil {
			return pelScan{}, err
		}
		clashes, err := redisx.Collisions(ctx, c, stream, pageIDs(page), w.carry, w.deadLetter)
		if err != nil {
			return pelScan{}, err
		}
		for _, p := range page {
			g, isGone := gone[p.ID]
			clash := clashes[p.ID]
			switch {
			case isGone:
				scan.hits = append(scan.hits, entry{ID: p.ID, Consumer: g.Consumer, Deliveries: g.Deliveries, Gone: true})
			case p.Deliveries >= minDeliveries || clash != "":
				scan.hits = append(scan.hits, entry{ID: p.ID, Consumer: p.Consumer, Deliveries: p.Deliveries, Clash: clash})
			}
		}
		if int64(len(page)) < count {
			return scan, nil
		}
		after = page[len(page)-1].ID
	}
	more, err := redisx.PendingPage(ctx, c, stream, group, "", 0, after, 1)
	if err != nil {
		return pelScan{}, err
	}
	scan.truncated = len(more) > 0
	return scan, nil
}

// findings groups the scan's hits per consumer: one Bouncing and one
// Tombstone finding at most for each.
func (s pelScan) findings(minDeliveries int64) []Finding {
	type group struct {
		ids []string
		n   int64
		top entry
	}
	groups := map[Kind]map[string]*group{Bouncing: {}, Tombstone: {}, FieldCollision: {}}
	clashes := map[string][]string{}
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
		if e.Clash != "" {
			add(FieldCollision, e)
			if !slices.Contains(clashes[e.Consumer], e.Clash) {
				clashes[e.Consumer] = append(clashes[e.Consumer], e.Clash)
			}
		}
	}
	var out []Finding
	for _, k := range []Kind{Bouncing, Tombstone, FieldCollision} {
		names := make([]string, 0, len(groups[k]))
		for name := range groups[k] {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			g := groups[k][name]
			var d string
			switch k {
			case Bouncing:
				d = s.bouncingDetail(g.n, minDeliveries, g.top)
			case Tombstone:
				d = s.tombstoneDetail(g.n)
			default:
				d = s.collisionDetail(g.n, clashes[name])
			}
			out = append(out, Finding{Kind: k, Consumer: name, IDs: g.ids, Detail: d, Entries: g.n})
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

func (s pelScan) collisionDetail(n int64, fields []string) string {
	return fmt.Sprintf("%d pending %s hold their own field %s, which a reclaim would write (deliveryCountField, its marker pelwarden-carried, "+
		"a copy's pelwarden-original-stream or -id, or a dead-letter record's field), or a marker pelwarden-carried naming a field of the job: "+
		"pelwarden never writes over or drops a field of a job, so reclaims leave them pending; "+
		"choose a deliveryCountField the jobs do not use, or have a worker process them%s",
		n, plural(n, "entry", "entries"), strings.Join(fields, ", "), s.suffix(n))
}

func pageIDs(page []redisx.PendingEntry) []string {
	ids := make([]string, len(page))
	for i, p := range page {
		ids[i] = p.ID
	}
	return ids
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
