package redisx

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// layout builds a stream from a pattern, one entry a letter, job = its
// position: G the ghost holds it, O the consumer "other" holds it, A it
// was delivered and acknowledged, X the ghost holds it but the stream
// entry is deleted (a tombstone). ids gives each position's id ("" lets
// Redis choose). It returns the ids by letter.
func layout(t *testing.T, rdb *redis.Client, pattern string, id func(int) string) map[byte][]string {
	t.Helper()
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	pipe := rdb.Pipeline()
	for i := range pattern {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", ID: id(i), Values: []any{"job", strconv.Itoa(i)}})
	}
	cmds, err := pipe.Exec(ctx)
	require.NoError(t, err)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", len(pattern))
	by := map[byte][]string{}
	for i, c := range cmds {
		by[pattern[i]] = append(by[pattern[i]], c.(*redis.StringCmd).Val())
	}
	if ids := by['O']; len(ids) > 0 {
		require.NoError(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "other", Messages: ids}).Err())
	}
	if ids := by['A']; len(ids) > 0 {
		require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids...).Err())
	}
	if ids := by['X']; len(ids) > 0 {
		require.NoError(t, rdb.XDel(ctx, "jobs", ids...).Err())
	}
	return by
}

// rangeReads runs fn and returns, for each XRANGE Redis ran meanwhile
// (scripts' included), its COUNT, or 0 for an XRANGE without one, as
// MONITOR shows them.
func rangeReads(t *testing.T, srv *redistest.Server, fn func()) []int {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", line)
	fn()
	const done = "range-reads-done"
	require.NoError(t, srv.Client(t).Echo(context.Background(), done).Err())
	var counts []int
	for {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, done) {
			return counts
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.EqualFold(f[3], `"XRANGE"`) {
			continue
		}
		n := 0
		if len(f) == 9 && strings.EqualFold(f[7], `"COUNT"`) {
			n, err = strconv.Atoi(strings.Trim(f[8], `"`))
			require.NoError(t, err)
		}
		counts = append(counts, n)
	}
}

// pageAll runs paged batches of count to the end of the ghost's PEL, as
// the engine does, and returns the summed counts and the batches run.
func pageAll(t *testing.T, rdb *redis.Client, r Reclaim) (map[Outcome]int64, int) {
	t.Helper()
	counts, batches := map[Outcome]int64{}, 0
	for {
		res, err := RunReclaim(context.Background(), rdb, r)
		require.NoError(t, err)
		batches++
		for o, n := range res.Counts {
			counts[o] += n
		}
		if res.Total() < r.Count {
			return counts, batches
		}
		r.After = res.Last
	}
}

// TestAPagedRequeueCopiesEveryEntryWhateverLiesBetweenThem: a page's
// entries are read by range where the ghost's entries lie together and
// one by one where others' lie between; either way each copy holds its
// own original's fields, a deleted entry is a tombstone wherever it falls
// (first or last of a page, inside or past a range read), and nothing
// else is touched. A dense PEL takes one range read a page (two where a
// page is longer than the first range); no layout takes more reads than
// one a page plus one an entry, nor has its range reads ask for more than
// twice the entries on its pages.
func TestAPagedRequeueCopiesEveryEntryWhateverLiesBetweenThem(t *testing.T) {
	t.Parallel()
	// ids past where a Lua number holds integers exactly (2^53), with
	// 20-digit sequences, take the same paths (FuzzStreamIDOrder checks
	// the comparison itself).
	wide := func(i int) string { return fmt.Sprintf("%d-18446744073709551600", 1<<53-3+i) }
	auto := func(int) string { return "" }
	cases := map[string]struct {
		pattern string
		id      func(int) string
		// count is the page size, 10 unless set.
		count int64
		// readsPerPage, when set, is the most XRANGEs a page may take;
		// maxAsked, when set, the most entries all of them may ask for.
		readsPerPage, maxAsked int
	}{
		"together":                    {pattern: strings.Repeat("G", 25), id: auto, readsPerPage: 1},
		"one in four":                 {pattern: strings.Repeat("GOOO", 20), id: auto},
		"one in twenty":               {pattern: strings.Repeat("G"+strings.Repeat("O", 19), 12), id: auto},
		"two in three":                {pattern: strings.Repeat("GGO", 15), id: auto},
		"acknowledged between":        {pattern: strings.Repeat("GAGAA", 8), id: auto},
		"tombstones at the page ends": {pattern: "XGGGGGGGGX" + "XGGXGGXXGG" + "GGGGX", id: auto, readsPerPage: 1},
		"all tombstones":              {pattern: strings.Repeat("X", 15), id: auto, readsPerPage: 1},
		"mixed":                       {pattern: strings.Repeat("GGOXGOGGXOOXGGAX", 4), id: auto},
		"mixed, ids about 2^53":       {pattern: strings.Repeat("GGOXGOGGXOOXGGAX", 2), id: wide},
		// Pages longer than the first range (128): the next one is longer,
		// and a page found sparse stops reading ranges after that first one.
		"together, long pages":    {pattern: strings.Repeat("G", 700), id: auto, count: 300, readsPerPage: 2},
		"one in four, long pages": {pattern: strings.Repeat("GOOO", 300), id: auto, count: 300, maxAsked: 128},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			by := layout(t, rdb, tc.pattern, tc.id)

			var counts map[Outcome]int64
			var batches int
			reads := rangeReads(t, srv, func() {
				counts, batches = pageAll(t, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries", Count: cmp.Or(tc.count, 10)})
			})
			want := map[Outcome]int64{}
			if n := len(by['G']); n > 0 {
				want[Requeued] = int64(n)
			}
			if n := len(by['X']); n > 0 {
				want[Tombstoned] = int64(n)
			}
			require.Equal(t, want, counts)
			held := len(by['G']) + len(by['X'])
			if tc.readsPerPage > 0 {
				require.LessOrEqual(t, len(reads), tc.readsPerPage*batches, "%d range reads a page at most", tc.readsPerPage)
			}
			require.LessOrEqual(t, len(reads), batches+held, "never more reads than one a page and one an entry")
			asked := 0
			for _, n := range reads {
				asked += n
			}
			require.LessOrEqual(t, asked, 2*held, "range reads ask for at most twice the entries on the pages")
			if tc.maxAsked > 0 {
				require.LessOrEqual(t, asked, tc.maxAsked, "range reads of a sparse page ask for no more than the first")
			}

			// Each original the ghost held has exactly one copy, with its
			// own job field.
			all, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
			require.NoError(t, err)
			job := map[string]string{}
			copies := map[string]int{}
			for _, e := range all {
				if orig, ok := e.Values["pelwarden-original-id"].(string); ok {
					copies[orig]++
					require.Equal(t, job[orig], e.Values["job"], "the copy of %s holds its original's job", orig)
					continue
				}
				job[e.ID] = e.Values["job"].(string)
			}
			require.Len(t, copies, len(by['G']))
			for _, id := range by['G'] {
				require.Equal(t, 1, copies[id], "one copy of %s", id)
			}
			p, err := rdb.XPending(ctx, "jobs", "workers").Result()
			require.NoError(t, err)
			require.Zero(t, p.Consumers["ghost"], "the ghost holds nothing")
			require.Equal(t, int64(len(by['O'])), p.Consumers["other"], "the other consumer's entries stay")
		})
	}
}

// TestAClaimCountsOneDeliveryOnEachEntryWhateverItsCount: one batch claims
// entries delivered once, three and five times; each ends one delivery
// further, as a plain XCLAIM would leave it.
func TestAClaimCountsOneDeliveryOnEachEntryWhateverItsCount(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 6)
	before := map[string]int64{}
	for i, id := range ids {
		n := int64(1 + 2*(i%3))
		before[id] = n
		require.NoError(t, rdb.Do(ctx, "XCLAIM", "jobs", "workers", "ghost", 0, id, "RETRYCOUNT", n, "JUSTID").Err())
	}
	res, err := RunReclaim(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", ClaimTo: "live", Count: 10})
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{Claimed: 6}, res.Counts)
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, ext, 6)
	for _, e := range ext {
		require.Equal(t, "live", e.Consumer)
		require.Equal(t, before[e.ID]+1, e.RetryCount, "%s: one more delivery", e.ID)
	}
}

// TestAnErrorInsideAPageStillAcknowledgesEveryEntryCopiedBeforeIt: the
// script is made to fail after the third entry of a page. The three
// copies written are acknowledged; the rest is untouched, so the next
// run copies each of those once.
func TestAnErrorInsideAPageStillAcknowledgesEveryEntryCopiedBeforeIt(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 6)
	call := "act(row[1], row[4], entry(i))"
	require.Contains(t, reclaimLua, call, "the page loop this test breaks into")
	failing := redis.NewScript(guardLua + entriesLua + strings.Replace(reclaimLua, call, call+" if i == 3 then error('injected') end", 1))
	args := []any{"workers", "ghost", 0, "pelwarden-deliveries", 0, "0", "", "", 10, "0", ""}
	err := failing.Run(ctx, rdb, []string{"jobs", "jobs"}, args...).Err()
	require.ErrorContains(t, err, "injected")
	require.Equal(t, map[string]int64{"ghost": 3}, mustPending(t, rdb), "the three copied entries were acknowledged")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(9), n, "six originals and three copies")

	again := requeue(nil)
	again.Count = 10
	res, err := RunReclaim(ctx, rdb, again)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{Requeued: 3}, res.Counts)
	n, err = rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(12), n, "one copy of each")
}

// FuzzStreamIDOrder: the reclaim script's own comparison of two stream
// ids, run by Redis, agrees with comparing their two uint64 parts, over
// the whole range, where a Lua number no longer holds them exactly.
func FuzzStreamIDOrder(f *testing.F) {
	edges := []uint64{0, 1, 9, 10, 1<<53 - 1, 1 << 53, 1<<53 + 1, 999_999_999_999_999, 1_000_000_000_000_000, 1<<63 - 1, 1 << 63, ^uint64(0) - 1, ^uint64(0)}
	for i, a := range edges {
		b := edges[(i+1)%len(edges)]
		f.Add(a, b, b, a)
		f.Add(b, a, a, b)
		f.Add(a, a, a, b)
		f.Add(a, b, a, a)
		f.Add(a, b, a, b)
	}
	rdb := redistest.Start(f).Client(f)
	order := redis.NewScript(entriesLua + "return id_le(ARGV[1], ARGV[2]) and 1 or 0")
	f.Fuzz(func(t *testing.T, ams, aseq, bms, bseq uint64) {
		a, b := fmt.Sprintf("%d-%d", ams, aseq), fmt.Sprintf("%d-%d", bms, bseq)
		got, err := order.Run(context.Background(), rdb, nil, a, b).Int()
		require.NoError(t, err)
		want := ams < bms || ams == bms && aseq <= bseq
		require.Equal(t, want, got == 1, "%s <= %s", a, b)
	})
}
