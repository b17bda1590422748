package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// BenchmarkRelease compares, over the same ghost PEL on a server with XNACK
// (PELWARDEN_REDIS_NEXT_SERVER, make bench REDIS_NEXT_SERVER=...),
// pelwarden's guarded release (XNACK of each page, checked per entry, no
// copy) with its guarded requeue and a raw XAUTOCLAIM COUNT 1000 loop, in
// one run and on one server. Each checks its own result.
func BenchmarkRelease(b *testing.B) {
	for _, n := range pelSizes(b) {
		b.Run(fmt.Sprintf("pel=%d", n), func(b *testing.B) {
			for _, mode := range []policy.ReclaimMode{policy.ReclaimRelease, policy.ReclaimRequeue} {
				b.Run("pelwarden-guarded-"+string(mode), func(b *testing.B) { guardedOnNext(b, n, mode) })
			}
			b.Run("xautoclaim-count-1000", func(b *testing.B) {
				_, rdb := ghostPELOf(b, nextServer(b), n)
				autoclaimAll(b, rdb, n, false)
			})
		})
	}
}

// nextServer is a server with XNACK: PELWARDEN_REDIS_NEXT_SERVER's, or the
// benchmark is skipped where the server lacks it.
func nextServer(b *testing.B) *redistest.Server {
	b.Helper()
	return redistest.StartWith(b, redistest.Options{}, redistest.XNack)
}

// guardedOnNext is one hygiene scan in mode over a ghost PEL of n entries.
func guardedOnNext(b *testing.B, n int, mode policy.ReclaimMode) {
	srv, rdb := ghostPELOf(b, nextServer(b), n)
	loop, tg := benchLoop(b, srv.Addr(), string(policy.ReclaimRequeue))
	tg.Hygiene.Mode, tg.Hygiene.ClaimingReaders = mode, mode == policy.ReclaimRelease
	want := map[policy.ReclaimMode]redisx.Outcome{policy.ReclaimRelease: redisx.Released, policy.ReclaimRequeue: redisx.Requeued}[mode]
	for b.Loop() {
		rep, err := loop.Scan(context.Background(), tg)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Counts()[want] != int64(n) {
			b.Fatalf("scan %s %d entries, want %d: %v", want, rep.Counts()[want], n, rep.Counts())
		}
	}
	rate(b, n)
	b.StopTimer()
	if mode == policy.ReclaimRequeue {
		verifyRequeuedOnce(b, rdb, n)
		return
	}
	verifyReleased(b, rdb, n)
}

// verifyReleased checks that the ghost's n entries are pending with no
// owner and that no copy was written.
func verifyReleased(b *testing.B, rdb *redis.Client, n int) {
	b.Helper()
	ctx := context.Background()
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil || p.Consumers["ghost"] != 0 {
		b.Fatalf("the ghost still holds entries after release: %v %v", p, err)
	}
	var owned int64
	for _, c := range p.Consumers {
		owned += c
	}
	if released := p.Count - owned; released != int64(n) {
		b.Fatalf("%d entries released, want %d", released, n)
	}
	length, err := rdb.XLen(ctx, "jobs").Result()
	if err != nil || length != int64(n)+1 {
		b.Fatalf("the stream holds %d entries, want the %d originals and live's one, no copy: %v", length, n, err)
	}
}
