package redisx

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestARequeuedCopyNamesItsFirstOriginal: a copy names the entry it
// copies; a copy of that copy still names the first entry, not the copy,
// so every delivery of the job names one original. With the carry field
// off, a copy is the job's fields and its lineage.
func TestARequeuedCopyNamesItsFirstOriginal(t *testing.T) {
	t.Parallel()
	for name, carry := range map[string]string{"carried count": "pelwarden-deliveries", "carry off": ""} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			ctx := context.Background()
			first := holdEntry(t, rdb, "job", "a")
			id := first
			for round := range 3 {
				outs, err := reclaimIDs(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: carry, IDs: []string{id}})
				require.NoError(t, err)
				require.Equal(t, Requeued, outs[0].Outcome, "round %d", round+1)
				want := []any{"job", "a", FieldOriginalStream, "jobs", FieldOriginalID, first}
				if carry != "" {
					want = append(want, carry, strconv.Itoa(round+1), "pelwarden-carried", carry)
				}
				require.Equal(t, want, rawFields(t, rdb, outs[0].Detail), "round %d: the copy names the first original, once", round+1)
				id = redistest.Read(t, rdb, "jobs", "workers", "ghost", 1)[0]
			}
		})
	}
}

// TestADeadLetteredCopyNamesTheEntryAndItsOriginal: a copy that reaches
// maxDeliveries is dead-lettered, on one step and on the two-step path:
// its record's origin fields name the copy, the entry that was
// dead-lettered, and its lineage fields, kept as the job's, name the
// first original. Nothing collides.
func TestADeadLetteredCopyNamesTheEntryAndItsOriginal(t *testing.T) {
	t.Parallel()
	for name, hold := range map[string]string{"one step": "", "two steps": liveness.DeadLetterHolder} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			ctx := context.Background()
			first := holdEntry(t, rdb, "job", "a")
			r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries", MaxDeliveries: 2,
				DeadLetterStream: "jobs:dead", Hold: hold, IDs: []string{first}}
			outs, err := reclaimIDs(ctx, rdb, r)
			require.NoError(t, err)
			require.Equal(t, Requeued, outs[0].Outcome, "one delivery: requeued")
			copyID := redistest.Read(t, rdb, "jobs", "workers", "ghost", 1)[0]

			r.IDs = []string{copyID}
			outs, err = reclaimIDs(ctx, rdb, r)
			require.NoError(t, err)
			if hold != "" {
				require.Equal(t, DeadLetterHeld, outs[0].Outcome)
				res, err := FinishHeld(ctx, rdb, Held{Stream: "jobs", Group: "workers", Holder: hold, DeadLetterStream: "jobs:dead",
					CarryField: "pelwarden-deliveries", Count: 10})
				require.NoError(t, err)
				require.Equal(t, map[Outcome]int64{DeadLettered: 1}, res.Counts)
			} else {
				require.Equal(t, DeadLettered, outs[0].Outcome, "two deliveries, the carried one counted: dead-lettered")
			}
			recs, err := rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
			require.NoError(t, err)
			require.Len(t, recs, 1)
			v := recs[0].Values
			require.Equal(t, "a", v["job"])
			require.Equal(t, copyID, v[FieldOriginID], "the record's origin is the copy it took")
			require.Equal(t, "jobs", v[FieldOriginStream])
			require.Equal(t, first, v[FieldOriginalID], "and its lineage names the first original")
			require.Equal(t, "jobs", v[FieldOriginalStream])
			require.Equal(t, "2", v[FieldDeliveries])
			require.NotContains(t, v, "pelwarden-carried", "the carried count is the record's own deliveries")
			pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
			require.NoError(t, err)
			require.Zero(t, pending.Count)
		})
	}
}
