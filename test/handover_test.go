package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestASIGKILLedPelwardenRestartedTakesItsLeaseBackAtOnce runs pelwarden
// as a process with the default identity (the host name, as a pod keeps
// its name across a container restart) and a lease TTL of an hour. It is
// SIGKILLed holding the group's lease; started again, it gives a new
// ghost's entries back at once instead of after the TTL. Then it is
// SIGKILLed again and a replica of another identity starts: that one
// waits the TTL out (it asks for the lease and is refused). The handover
// time, from the SIGKILL to the first entry given back, is logged.
func TestASIGKILLedPelwardenRestartedTakesItsLeaseBackAtOnce(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, "../cmd/pelwarden")[0]
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	lease := "pelwarden:lease:4:jobs:workers"
	start := func(name, identity string) (*proctest.Proc, string) {
		cfg, metrics := handoverConfig(t, srv.Addr(), identity)
		return proctest.Start(t, name, bin, "serve", "--config", cfg), metrics
	}

	redistest.Hold(t, rdb, "jobs", "workers", "ghost-1", "a", 3)
	first, _ := start("pelwarden-first", "")
	requireGivenBack(t, rdb, "ghost-1", first)
	value := rdb.Get(ctx, lease).Val()
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, host, redisx.LeaseIdentity(value), "the default identity is the host name")
	first.Kill()
	killed := time.Now()
	require.Positive(t, rdb.PTTL(ctx, lease).Val(), "the killed run left its lease behind")

	redistest.Hold(t, rdb, "jobs", "workers", "ghost-2", "b", 3)
	restarted, _ := start("pelwarden-restarted", "")
	requireGivenBack(t, rdb, "ghost-2", restarted)
	t.Logf("restart under the same identity: the new ghost's entries given back %s after the SIGKILL (lease TTL 1h)",
		time.Since(killed).Round(time.Millisecond))
	require.NotEqual(t, value, rdb.Get(ctx, lease).Val(), "the restarted run holds the lease under its own start")
	restarted.Kill()

	redistest.Hold(t, rdb, "jobs", "workers", "ghost-3", "c", 3)
	other, metrics := start("pelwarden-other", "another-replica")
	refused := `pelwarden_hygiene_leader{group="workers",redis="default",stream="jobs"} 0`
	eventually(t, 60*time.Second, func() error {
		if body := metricsOf(metrics); !strings.Contains(body, refused) {
			return fmt.Errorf("another identity has not yet been refused the lease\n%s", other.Tail(20))
		}
		return nil
	})
	require.Equal(t, int64(3), rdb.XPending(ctx, "jobs", "workers").Val().Consumers["ghost-3"],
		"another identity waits the TTL out: the ghost's entries stay")
}

// handoverConfig writes a pelwarden configuration with one hygiene target
// on jobs/workers (idle liveness, short thresholds) and returns its path
// and the /metrics address.
func handoverConfig(t *testing.T, redisAddr, identity string) (path, metrics string) {
	t.Helper()
	httpAddr := freeAddr(t)
	cfg := fmt.Sprintf(`grpc:
  addr: %s
http:
  addr: %s
redis:
  - name: default
    addr: %s
    idleBefore72: ghost
hygiene:
  scanInterval: 200ms
  leaseTTL: 1h
  identity: "%s"
  targets:
    - stream: jobs
      consumerGroup: workers
      reclaim: requeue
      liveness: idle
      ghostIdleSeconds: "0.5"
      entryStaleSeconds: "0.1"
`, freeAddr(t), httpAddr, redisAddr, identity)
	path = filepath.Join(t.TempDir(), "pelwarden.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path, "http://" + httpAddr + "/metrics"
}

// freeAddr is a loopback address on a port not given out before in this
// process: the kernel hands a port it just gave out again soon, and the
// gRPC and HTTP addresses of one configuration were once the same.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := proctest.FreePort()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// requireGivenBack waits until ghost holds nothing.
func requireGivenBack(t *testing.T, rdb *redis.Client, ghost string, p *proctest.Proc) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		if n := rdb.XPending(t.Context(), "jobs", "workers").Val().Consumers[ghost]; n != 0 {
			return fmt.Errorf("%s still holds %d\n%s", ghost, n, p.Tail(20))
		}
		return nil
	})
}

// metricsOf is the /metrics page at url, or why it could not be read: the
// process may not listen yet.
func metricsOf(url string) string {
	resp, err := http.Get(url) //nolint:noctx // a loopback address the test chose, polled until it answers
	if err != nil {
		return err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
