package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// claimers are workers of Redis 8.4: each reads with XREADGROUP ... CLAIM
// minIdle (released entries and entries idle past minIdle, whoever holds
// them, then new ones), holds what it read for hold, then acknowledges
// it. processed records every entry id a worker acknowledged, with its
// job; a job processed twice shows as two ids of one job, or one id twice.
type claimers struct {
	mu        sync.Mutex
	processed map[string][]string // job -> entry ids
	wg        sync.WaitGroup
	stop      context.CancelFunc
}

func startClaimers(t *testing.T, rdb *redis.Client, n int, minIdle, hold time.Duration) *claimers {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	c := &claimers{processed: map[string][]string{}, stop: stop}
	for i := range n {
		name := "reader-" + strconv.Itoa(i)
		c.wg.Go(func() { c.run(ctx, rdb, name, minIdle, hold) })
	}
	t.Cleanup(c.halt)
	return c
}

func (c *claimers) halt() {
	c.stop()
	c.wg.Wait()
}

func (c *claimers) run(ctx context.Context, rdb *redis.Client, name string, minIdle, hold time.Duration) {
	for ctx.Err() == nil {
		entries := readClaiming(ctx, rdb, name, minIdle, 10)
		if len(entries) == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return // the reads stay pending: the books say so
		case <-time.After(hold):
		}
		ids := make([]string, 0, len(entries))
		for _, e := range entries {
			ids = append(ids, e.id)
		}
		if rdb.XAck(ctx, "jobs", "workers", ids...).Err() != nil {
			continue
		}
		c.mu.Lock()
		for _, e := range entries {
			c.processed[e.job] = append(c.processed[e.job], e.id)
		}
		c.mu.Unlock()
	}
}

// readClaiming is one XREADGROUP ... CLAIM of up to count entries.
func readClaiming(ctx context.Context, rdb *redis.Client, name string, minIdle time.Duration, count int) []claimedEntry {
	reply, err := rdb.Do(ctx, "XREADGROUP", "GROUP", "workers", name, "COUNT", count, "BLOCK", 100,
		"CLAIM", minIdle.Milliseconds(), "STREAMS", "jobs", ">").Result()
	if errors.Is(err, redis.Nil) || err != nil {
		return nil
	}
	return claimedEntries(reply)
}

// crashEvery starts, every interval until the test ends, a worker that
// reads up to 5 new entries and crashes holding them: its entries are a
// ghost's to the hygiene loop and stale to the readers alike, all through
// the run. (One that crashed holding entries it had claimed would hold
// entries another reader had processed already: each reader answers for
// the entries it claims from another, and the books below could not tell
// those from pelwarden's.)
func crashEvery(t *testing.T, rdb *redis.Client, every time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
			_ = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "crashed-" + strconv.Itoa(i),
				Streams: []string{"jobs", ">"}, Count: 5, Block: -1}).Err()
		}
	})
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

type claimedEntry struct{ id, job string }

// claimedEntries reads one stream's XREADGROUP reply (RESP3: a map of the
// stream to its entries; a claimed entry carries two more fields, its
// idle time and its delivery count).
func claimedEntries(reply any) []claimedEntry {
	var out []claimedEntry
	m, _ := reply.(map[any]any)
	for _, v := range m {
		rows, _ := v.([]any)
		for _, r := range rows {
			row, _ := r.([]any)
			if len(row) < 2 {
				continue
			}
			id, _ := row[0].(string)
			fields, _ := row[1].([]any)
			e := claimedEntry{id: id}
			for i := 0; i+1 < len(fields); i += 2 {
				if fields[i] == "job" {
					e.job, _ = fields[i+1].(string)
				}
			}
			out = append(out, e)
		}
	}
	return out
}

func (c *claimers) jobs() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]string, len(c.processed))
	for k, v := range c.processed {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// ghosts have n consumers read per entries each and never acknowledge
// them, as workers that crashed.
func ghosts(t *testing.T, rdb *redis.Client, n, per int) {
	t.Helper()
	for i := range n {
		redistest.Read(t, rdb, "jobs", "workers", "ghost-"+strconv.Itoa(i), per)
	}
}

// copiesByOriginal counts pelwarden's requeued copies in the stream by the
// entry they copy.
func copiesByOriginal(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	all, err := rdb.XRange(context.Background(), "jobs", "-", "+").Result()
	require.NoError(t, err)
	out := map[string]int{}
	for _, e := range all {
		if id, ok := e.Values[redisx.FieldOriginalID].(string); ok {
			out[id]++
		}
	}
	return out
}

// waitAllProcessed waits until every one of n jobs was acknowledged by a
// reader and nothing is pending or unread.
func waitAllProcessed(t *testing.T, rdb *redis.Client, c *claimers, n int, within time.Duration) {
	t.Helper()
	eventually(t, within, func() error {
		done := len(c.jobs())
		p, err := rdb.XPending(context.Background(), "jobs", "workers").Result()
		if err != nil {
			return err
		}
		if done < n || p.Count > 0 {
			return fmt.Errorf("%d of %d jobs processed, %d entries pending", done, n, p.Count)
		}
		return nil
	})
}

// Workers that read with CLAIM take a ghost's entries once past their
// min-idle, and the hygiene loop gives the same ghosts' entries back at
// entryStaleSeconds: the two race, and the guard must keep every entry to
// one of them. Afterwards Redis shows no entry lost (every job processed,
// nothing pending), no entry copied twice, and no entry both taken by a
// reader and copied by pelwarden; Findings names the claiming readers.
func TestClaimingReadersBesideHygieneLoseNothingAndGiveNothingBackTwiceOnRedis8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{}, redistest.ReadClaim)
	rdb := srv.Client(t)
	ctx := context.Background()
	const jobs = 240
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "job-", jobs)
	// Four workers crash holding 30 entries each, and one more every
	// 300 ms while the others work.
	ghosts(t, rdb, 4, 30)
	// A reader reads at least every 1.1 s (it holds what it read for a
	// second): a consumer quiet for 3 s has crashed, with room for a
	// reader the CPU kept waiting.
	p, admin := startAdmin(t, srv.Addr(), hygieneTarget("ghostIdleSeconds", "3", "entryStaleSeconds", "0.6"))
	// The readers' min-idle is the hygiene loop's entryStaleSeconds: both
	// reach for the ghosts' entries at once. Each reader holds what it read
	// for a second, past both: an entry a reader holds turns as stale to
	// the loop as a ghost's (only the owner tells them apart), and readers
	// take entries from each other too, which is theirs to answer for.
	c := startClaimers(t, rdb, 4, 600*time.Millisecond, time.Second)
	stopCrashing := crashEvery(t, rdb, 300*time.Millisecond)
	eventually(t, 60*time.Second, func() error {
		if n := len(c.jobs()); n < jobs {
			return fmt.Errorf("%d of %d jobs processed", n, jobs)
		}
		return nil
	})
	stopCrashing()
	waitAllProcessed(t, rdb, c, jobs, 30*time.Second)
	c.halt()

	// A job's entries are its original and pelwarden's copies, each copy
	// made from an entry pelwarden took from a ghost. Each entry ends
	// either processed by a reader or given back once (its copy in its
	// place), so exactly one of a job's entries is ever processed: none
	// means the job was lost; two mean an entry was both taken by a reader
	// and given back, or given back twice. Readers that took one entry from
	// each other process that one id twice, which is theirs, not
	// pelwarden's.
	processed := c.jobs()
	require.Len(t, processed, jobs, "no job lost")
	for job, ids := range processed {
		distinct := map[string]bool{}
		for _, id := range ids {
			distinct[id] = true
		}
		require.Len(t, distinct, 1, "%s: exactly one of its entries was processed, not %v", job, ids)
	}
	copies := 0
	for _, n := range copiesByOriginal(t, rdb) {
		copies += n
	}
	pend, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pend.Count, "nothing is left pending")

	// Metrics: what pelwarden says it gave back is what Redis shows.
	requeued := actions(t, p, "requeued")
	require.Equal(t, int64(copies), requeued, "one copy per requeue")
	t.Logf("pelwarden requeued %d entries of crashed readers; the readers claimed the rest", requeued)

	f, err := admin.Findings(authed(), &pelwardenv1.FindingsRequest{Target: jobsRef})
	require.NoError(t, err)
	var kinds []pelwardenv1.FindingKind
	for _, fd := range f.GetFindings() {
		kinds = append(kinds, fd.GetKind())
	}
	require.Contains(t, kinds, pelwardenv1.FindingKind_FINDING_KIND_CLAIMING_READERS, "the readers were seen to claim: %v", f.GetFindings())
}

// actions reads pelwarden_hygiene_actions_total of jobs/workers for one
// outcome from /metrics; 0 while the series is absent.
func actions(t *testing.T, p *pelwarden, outcome string) int64 {
	t.Helper()
	v := gauge(t, p.app.HTTPAddr(), `pelwarden_hygiene_actions_total{group="workers",outcome="`+outcome+`",redis="default",stream="jobs"}`)
	return int64(max(v, 0))
}

// Release mode gives every entry the crashed workers held back under its
// own id; readers that claim take them at once. The books balance: every
// job processed exactly once, no copy in the stream, nothing pending, and
// pelwarden released exactly what the ghosts held.
func TestReleaseGivesBackAndTheBooksBalanceOnRedis8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{}, redistest.XNack, redistest.ReadClaim)
	rdb := srv.Client(t)
	ctx := context.Background()
	const jobs, held = 200, 3 * 25
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "job-", jobs)
	ghosts(t, rdb, 3, 25)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
		c.Hygiene.Targets = []map[string]string{hygieneTarget("reclaim", "release", "claimingReaders", "true",
			"ghostIdleSeconds", "0.3", "entryStaleSeconds", "0.3")}
	})
	// The readers' min-idle is an hour: they take nothing from the ghosts
	// themselves, only what pelwarden releases.
	c := startClaimers(t, rdb, 3, time.Hour, 10*time.Millisecond)
	waitAllProcessed(t, rdb, c, jobs, 60*time.Second)
	c.halt()

	for job, ids := range c.jobs() {
		require.Len(t, ids, 1, "%s was processed once: %v", job, ids)
	}
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(jobs), n, "no copy: every entry kept its id")
	require.Empty(t, copiesByOriginal(t, rdb))
	pend, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pend.Count)
	require.Equal(t, int64(held), actions(t, p, "released"), "pelwarden released what the ghosts held, each once")
	require.Zero(t, actions(t, p, "requeued"))
}
