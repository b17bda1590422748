package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestAnEntryWhoseMarkerNamesAFieldOfTheJobLosesNothing: a ghost holds a
// job with amount: 100 and a pelwarden-carried marker naming amount, as
// if amount were a count pelwarden carried, beside a plain job. The plain
// job is requeued; the other is a field-collision: it stays pending under
// its owner, byte for byte, scan after scan, no copy of it is written (a
// copy would have dropped amount), and Findings and the metrics say so.
func TestAnEntryWhoseMarkerNamesAFieldOfTheJobLosesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ids := holdFields(t, rdb, "jobs", "gone", []any{"job", "pay", "amount", "100", "pelwarden-carried", "amount"}, []any{"job", "plain"})
	plantSecrets(t, rdb)
	entry := rawEntry(t, rdb, "jobs", ids[0])
	keys := otherKeys(t, rdb)
	cfg := testConfig(srv.Addr())
	cfg.Hygiene.ScanInterval, cfg.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget()}
	s := startStranger(t, cfg)

	eventually(t, 10*time.Second, func() error {
		if n := jobCopies(t, rdb, "jobs")["plain"]; n != 2 {
			return fmt.Errorf("%d entries of the plain job, want the original and its copy", n)
		}
		return nil
	})
	time.Sleep(time.Second) // more scans, each meeting the collision again
	after := readBooks(t, rdb)
	require.Equal(t, []string{ids[0] + " gone 1"}, after.Pending["jobs"], "the entry stays pending under its owner, delivered once")
	require.Equal(t, entry, rawEntry(t, rdb, "jobs", ids[0]), "every field kept, in order")
	require.Equal(t, 1, jobCopies(t, rdb, "jobs")["pay"], "no copy was written, so no copy without amount")
	require.Equal(t, keys, otherKeys(t, rdb))

	f, err := s.admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: jobsRef})
	require.NoError(t, err)
	s.saw(t, f)
	var found []string
	for _, fd := range f.GetFindings() {
		if fd.GetKind() == pelwardenv1.FindingKind_FINDING_KIND_FIELD_COLLISION {
			found = append(found, fmt.Sprint(fd.GetConsumer(), " ", fd.GetIds()))
			require.Contains(t, fd.GetDetail(), "pelwarden-carried")
		}
	}
	require.Equal(t, []string{fmt.Sprint("gone ", []string{ids[0]})}, found, "Findings reports it by the script's own rule")
	require.Regexp(t, `pelwarden_hygiene_skipped_total\{group="workers",reason="field-collision",redis="default",stream="jobs"\} [1-9]`,
		scrape(t, s.app.HTTPAddr()))
	s.requireNoSecret(t)
}

// TestEveryCopyNamesItsFirstOriginal: a job is held by a ghost, requeued by
// the hygiene loop, read by a second worker that dies too, requeued again,
// read by a third that dies, and then, at maxDeliveries 3, dead-lettered.
// Each copy names the first entry, never the copy before it, so the two
// deliveries a worker could see are one job to it; the dead-letter record
// names the copy it took as its origin and the first entry as its
// original. Nothing else in Redis moves.
func TestEveryCopyNamesItsFirstOriginal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	first := holdFields(t, rdb, "jobs", "ghost-1", []any{"job", "a", "payload", "x"})[0]
	redistest.CreateGroup(t, rdb, "payments", "billing")
	redistest.AddJobs(t, rdb, "payments", "pay-", 1)
	payments := readBooks(t, rdb)
	_, _ = startAdmin(t, srv.Addr(), hygieneTarget("maxDeliveries", "3"))

	copyOf := func(after string) redis.XMessage {
		var c redis.XMessage
		eventually(t, 10*time.Second, func() error {
			all, err := rdb.XRangeN(ctx, "jobs", "("+after, "+", 1).Result()
			switch {
			case err != nil:
				return err
			case len(all) == 0:
				return fmt.Errorf("no copy after %s yet", after)
			}
			c = all[0]
			return nil
		})
		return c
	}
	c1 := copyOf(first)
	require.Equal(t, map[string]any{"job": "a", "payload": "x", redisx.FieldOriginalStream: "jobs", redisx.FieldOriginalID: first,
		"pelwarden-deliveries": "1", "pelwarden-carried": "pelwarden-deliveries"}, c1.Values, "the first copy names the entry it copies")
	require.Equal(t, c1.ID, redistest.Read(t, rdb, "jobs", "workers", "ghost-2", 1)[0])
	c2 := copyOf(c1.ID)
	require.Equal(t, map[string]any{"job": "a", "payload": "x", redisx.FieldOriginalStream: "jobs", redisx.FieldOriginalID: first,
		"pelwarden-deliveries": "2", "pelwarden-carried": "pelwarden-deliveries"}, c2.Values, "a copy of a copy names the first original, not the copy")
	require.Equal(t, c2.ID, redistest.Read(t, rdb, "jobs", "workers", "ghost-3", 1)[0])

	var dead []redis.XMessage
	eventually(t, 10*time.Second, func() error {
		var err error
		dead, err = rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
		if err == nil && len(dead) != 1 {
			err = fmt.Errorf("%d dead-letter records", len(dead))
		}
		return err
	})
	v := dead[0].Values
	require.Equal(t, c2.ID, v[redisx.FieldOriginID], "the record's origin is the copy it took")
	require.Equal(t, first, v[redisx.FieldOriginalID], "its lineage, kept as the job's fields, names the first original")
	require.Equal(t, "jobs", v[redisx.FieldOriginalStream])
	require.Equal(t, "3", v[redisx.FieldDeliveries])
	require.Equal(t, "a", v["job"])
	require.Len(t, jobCopies(t, rdb, "jobs"), 1)
	require.Equal(t, 3, jobCopies(t, rdb, "jobs")["a"], "the original and two copies, no more")
	require.Zero(t, rdb.XPending(ctx, "jobs", "workers").Val().Count, "nothing is left pending")
	after := readBooks(t, rdb)
	require.Equal(t, payments.Entries["payments"], after.Entries["payments"], "another stream is untouched")
	require.Equal(t, payments.Pending["payments"], after.Pending["payments"])
}
