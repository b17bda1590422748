package chaos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redisx"
)

// waitForBooks waits until every job is acknowledged or dead-lettered and
// nothing is pending.
func waitForBooks(t *testing.T, f *fleet, s *setup) {
	rdb, sz := s.rdb, s.sz
	t.Helper()
	ctx := context.Background()
	want := int64(sz.entries + sz.hoard)
	deadline := time.Now().Add(sz.settle)
	var done, dead, pending int64
	for time.Now().Before(deadline) {
		done, _ = rdb.HLen(ctx, s.ledger).Result()
		dead, _ = rdb.XLen(ctx, s.dlq).Result()
		p, err := rdb.XPending(ctx, s.stream, group).Result()
		if err == nil {
			pending = p.Count
		}
		if done+dead >= want && pending == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("books did not settle within %s: %d processed + %d dead-lettered of %d, %d pending\n%s",
		sz.settle, done, dead, want, pending, f.logs())
}

func checkBooks(t *testing.T, s *setup) {
	rdb, sz := s.rdb, s.sz
	t.Helper()
	ctx := context.Background()
	counts, err := rdb.HGetAll(ctx, s.ledger).Result()
	require.NoError(t, err)
	deadRecords, err := rdb.XRange(ctx, s.dlq, "-", "+").Result()
	require.NoError(t, err)
	dead := map[string]int{}
	var deadTooSoon []string
	for _, r := range deadRecords {
		job := r.Values["job"].(string)
		dead[job]++
		// Only the delivery limit sends an entry to the dead-letter stream.
		if n, _ := strconv.Atoi(fmt.Sprint(r.Values["pelwarden-deliveries"])); n < maxDeliveries {
			deadTooSoon = append(deadTooSoon, fmt.Sprintf("%s (%v deliveries)", job, r.Values["pelwarden-deliveries"]))
		}
	}

	// The producer retries through the Redis restart, and a retried
	// pipeline can add an entry twice: count the originals (entries that
	// name no original of their own: pelwarden's copies name the first
	// one) so each entry, not each job number, must be processed once.
	originals := map[string]int{}
	originalIDs := map[string]bool{}
	var copies []redis.XMessage
	for start := "-"; ; {
		page, err := rdb.XRangeN(ctx, s.stream, start, "+", 5000).Result()
		require.NoError(t, err)
		for _, e := range page {
			if _, isCopy := e.Values[redisx.FieldOriginalID]; isCopy {
				copies = append(copies, e)
				continue
			}
			originals[e.Values["job"].(string)]++
			originalIDs[s.stream+"/"+e.ID] = true
		}
		if len(page) < 5000 {
			break
		}
		start = "(" + page[len(page)-1].ID
	}

	var lost, twice, wrongDead, slowDead []string
	check := func(job string, poison bool) {
		n, _ := strconv.Atoi(counts[job])
		entries := originals[job]
		switch {
		case entries == 0:
			lost = append(lost, job+" (never in the stream)")
		case poison && (dead[job] != entries || n != 0):
			wrongDead = append(wrongDead, fmt.Sprintf("%s (processed %d, dead-lettered %d, entries %d)", job, n, dead[job], entries))
		case !poison && n > entries:
			twice = append(twice, fmt.Sprintf("%s (%d times, %d entries)", job, n, entries))
		case !poison && n+dead[job] < entries:
			lost = append(lost, fmt.Sprintf("%s (processed %d of %d entries, dead-lettered %d)", job, n, entries, dead[job]))
		case !poison && dead[job] > 0:
			// A good entry can reach maxDeliveries too: held by workers
			// that were killed, or taken past hardTimeoutSeconds from a
			// worker slowed by a loaded machine. It is not lost: it is in
			// the dead-letter stream with its count.
			slowDead = append(slowDead, job)
		}
	}
	poisonCount := 0
	for i := range sz.entries {
		poison := i%sz.poisonEvery == 0
		if poison {
			poisonCount++
		}
		check(strconv.Itoa(i), poison)
	}
	for i := range sz.hoard {
		check(strconv.Itoa(hoardJob(sz, i)), false)
	}
	for job := range counts {
		if _, err := strconv.Atoi(job); err != nil {
			t.Errorf("ledger has an entry without a job id: %s", job)
		}
	}
	require.Empty(t, lost, "entries neither processed nor dead-lettered")
	require.Empty(t, twice, "entries processed twice although no worker died holding them after processing")
	require.Empty(t, wrongDead, "poison entries not dead-lettered exactly once")
	require.Empty(t, deadTooSoon, "entries dead-lettered before maxDeliveries")
	require.Len(t, dead, poisonCount+len(slowDead), "the dead-letter stream holds the poison entries and good ones that reached maxDeliveries")
	if len(slowDead) > 0 {
		t.Logf("good entries that reached maxDeliveries and were dead-lettered: %v", slowDead)
	}
	poisonEntries := 0
	for job := range dead {
		poisonEntries += originals[job]
	}
	require.Len(t, deadRecords, poisonEntries, "one dead-letter record per poison entry")
	checkLineage(t, s, counts, originalIDs, copies)
	p, err := rdb.XPending(ctx, s.stream, group).Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, "nothing is left pending")
	strays, err := rdb.HGetAll(ctx, s.ledger+":stray").Result()
	require.NoError(t, err)
	if !s.failover {
		require.Empty(t, strays, "no job was processed from a delivery Redis no longer knew")
	} else if len(strays) > 0 {
		// At-least-once redelivery, not a duplicate: a worker processed a
		// delivery the promoted replica never saw, and the entry was
		// delivered again; its job is counted once in the ledger above.
		t.Logf("jobs processed from a delivery the failover undid, then delivered again: %v", strays)
	}
}

// checkLineage counts the duplicates pelwarden made by the lineage its
// copies carry: every copy names an original in the stream (the first
// one, not a copy), and no original was acknowledged twice, through
// itself or any of its copies. The workers count each acknowledged entry
// under the original it names, in the script that acknowledges it.
func checkLineage(t *testing.T, s *setup, counts map[string]string, originalIDs map[string]bool, copies []redis.XMessage) {
	t.Helper()
	var orphans []string
	for _, c := range copies {
		name := fmt.Sprint(c.Values[redisx.FieldOriginalStream], "/", c.Values[redisx.FieldOriginalID])
		if !originalIDs[name] {
			orphans = append(orphans, c.ID+" names "+name)
		}
	}
	require.Empty(t, orphans, "every copy names an original of the stream, never a copy")
	acked, err := s.rdb.HGetAll(context.Background(), s.ledger+":lineage").Result()
	require.NoError(t, err)
	var dupes []string
	total, processed := 0, 0
	for name, v := range acked {
		n, _ := strconv.Atoi(v)
		total += n
		if n > 1 {
			dupes = append(dupes, fmt.Sprintf("%s (%d acknowledged deliveries)", name, n))
		}
		if !originalIDs[name] {
			orphans = append(orphans, name)
		}
	}
	for _, v := range counts {
		n, _ := strconv.Atoi(v)
		processed += n
	}
	require.Empty(t, dupes, "duplicates made by pelwarden: two acknowledged entries naming one original")
	require.Empty(t, orphans, "every acknowledged entry names an original of the stream")
	require.Equal(t, processed, total, "each acknowledged entry is counted under its original once")
	t.Logf("lineage: %d copies, %d originals acknowledged once each, no duplicate", len(copies), len(acked))
}
