package redistest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fault is a way a server refuses writes while it still serves reads, as
// production servers do; its value is the error prefix of a refused write.
type Fault string

// The faults Cause can make a server answer.
const (
	// FaultOOM: maxmemory below the memory used, with noeviction.
	FaultOOM Fault = "OOM"
	// FaultMisconf: an RDB save that failed, with
	// stop-writes-on-bgsave-error: the save directory was removed.
	FaultMisconf Fault = "MISCONF"
	// FaultReadonly: the server demoted to a replica (REPLICAOF) of a
	// master it cannot reach, so it keeps its data and serves reads.
	FaultReadonly Fault = "READONLY"
	// FaultNoReplicas: min-replicas-to-write 1 on a server without
	// replicas.
	FaultNoReplicas Fault = "NOREPLICAS"
)

// Faults lists every fault, in a stable order.
var Faults = []Fault{FaultOOM, FaultMisconf, FaultReadonly, FaultNoReplicas}

// faultSettings are the settings a server must know to cause a fault.
var faultSettings = map[Fault][]string{
	FaultOOM:        {"maxmemory", "maxmemory-policy"},
	FaultMisconf:    {"save", "stop-writes-on-bgsave-error"},
	FaultReadonly:   {"replica-read-only"},
	FaultNoReplicas: {"min-replicas-to-write"},
}

// FaultOptions are the options a server needs at start to be able to
// cause f: MISCONF saves into a directory of its own, which Cause
// removes (as root, a directory's mode does not stop a write; a
// directory that is gone does).
func FaultOptions(tb testing.TB, f Fault) Options {
	tb.Helper()
	if f != FaultMisconf {
		return Options{}
	}
	dir := filepath.Join(tb.TempDir(), "save")
	if err := os.Mkdir(dir, 0o750); err != nil {
		tb.Fatal(err)
	}
	return Options{Args: []string{"--dir", dir, "--save", "3600 1", "--stop-writes-on-bgsave-error", "yes"}}
}

// CanCause reports whether the server knows the settings that cause f,
// and if not which one it lacks: a server that knows them must refuse
// writes when Cause is called, one that does not cannot be asked to.
func (s *Server) CanCause(tb testing.TB, f Fault) (bool, string) {
	tb.Helper()
	cfg, err := s.Client(tb).ConfigGet(context.Background(), "*").Result()
	if err != nil {
		tb.Fatalf("redistest: CONFIG GET: %v", err)
	}
	for _, name := range faultSettings[f] {
		if _, ok := cfg[name]; !ok {
			return false, "the server has no setting " + name
		}
	}
	return true, ""
}

// Cause makes the server refuse writes with f, waits until a write is
// refused so, and returns the function that makes it accept writes again.
// It fails the test when the server refuses no write, or another way.
func (s *Server) Cause(tb testing.TB, f Fault) (undo func()) {
	tb.Helper()
	ctx := context.Background()
	rdb := s.Client(tb)
	set := func(kv ...string) {
		tb.Helper()
		for i := 0; i+1 < len(kv); i += 2 {
			if err := rdb.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
				tb.Fatalf("redistest: CONFIG SET %s %s: %v", kv[i], kv[i+1], err)
			}
		}
	}
	switch f {
	case FaultOOM:
		set("maxmemory-policy", "noeviction", "maxmemory", "1")
		undo = func() { set("maxmemory", "0") }
	case FaultMisconf:
		dir, err := rdb.ConfigGet(ctx, "dir").Result()
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.RemoveAll(dir["dir"]); err != nil {
			tb.Fatal(err)
		}
		if err := rdb.BgSave(ctx).Err(); err != nil {
			tb.Fatalf("redistest: BGSAVE: %v", err)
		}
		undo = func() { set("save", "") }
	case FaultReadonly:
		// Port 1 is never a Redis: the server stays a replica that keeps
		// its data and serves it.
		if err := rdb.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
			tb.Fatalf("redistest: REPLICAOF: %v", err)
		}
		undo = func() {
			if err := rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				tb.Fatalf("redistest: REPLICAOF NO ONE: %v", err)
			}
		}
	case FaultNoReplicas:
		set("min-replicas-to-write", "1")
		undo = func() { set("min-replicas-to-write", "0") }
	default:
		tb.Fatalf("redistest: no fault %q", f)
	}
	probe := "redistest:fault-probe"
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := rdb.Set(ctx, probe, "1", time.Second).Err()
		if redis.HasErrorPrefix(err, string(f)) {
			return undo
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the server should refuse writes with %s, and answers a write with %v", f, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f Fault) String() string { return string(f) }
