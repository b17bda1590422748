package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
)

func TestStartedServerAnswersSetAndGet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := Start(t).Client(t)

	require.NoError(t, c.Set(ctx, "k", "v", 0).Err(), "SET on a fresh server")
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err, "GET of a key just set")
	require.Equal(t, "v", got, "GET should return the value SET stored")
}

func TestKillMakesClientCommandsFail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := s.Client(t)
	require.NoError(t, c.Ping(ctx).Err(), "PING before Kill")

	s.Kill()

	require.Error(t, c.Ping(ctx).Err(), "PING after Kill should fail: nothing listens on %s", s.Addr())
}

func TestRestartKeepsDataOnlyWithAOF(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		aof      bool
		down     func(*Server)
		wantKept bool
	}{
		"aof keeps data across kill":                  {aof: true, down: (*Server).Kill, wantKept: true},
		"aof keeps data across stop":                  {aof: true, down: (*Server).Stop, wantKept: true},
		"no aof loses data across kill":               {aof: false, down: (*Server).Kill, wantKept: false},
		"no aof loses data across stop":               {aof: false, down: (*Server).Stop, wantKept: false},
		"aof keeps data across restart while running": {aof: true, down: func(*Server) {}, wantKept: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := Start(t, Options{AOF: tc.aof})
			c := s.Client(t)
			addr := s.Addr()
			require.NoError(t, c.Set(ctx, "k", "v", 0).Err(), "SET before going down")

			tc.down(s)
			s.Restart(t)

			require.Equal(t, addr, s.Addr(), "Restart should reuse the port")
			got, err := c.Exists(ctx, "k").Result()
			require.NoError(t, err, "EXISTS after Restart through the same client")
			want := int64(0)
			if tc.wantKept {
				want = 1
			}
			require.Equal(t, want, got, "EXISTS k after Restart (AOF=%v)", tc.aof)
		})
	}
}

// TestAClientThatFailedThroughAnOutageAnswersOnceRestartReturns: a
// go-redis client that failed to dial more times than its pool is large
// answers its last dial error, without dialing, until a dial it retries
// every second succeeds. Restart returns only once the server's clients
// answer, so a test's first command after it does not meet the outage.
func TestAClientThatFailedThroughAnOutageAnswersOnceRestartReturns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Stop()
	var failed sync.WaitGroup
	for range c.Options().PoolSize {
		failed.Go(func() { assert.Error(t, c.Ping(ctx).Err(), "the server is down") })
	}
	failed.Wait()
	s.Restart(t)
	require.NoError(t, c.Set(ctx, "k", "again", 0).Err(), "the first command after Restart")
}

func TestParallelServersGetDistinctPortsAndData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := Start(t), Start(t)

	require.NotEqual(t, a.Addr(), b.Addr(), "two servers must not share an address")
	require.NotEqual(t, a.Dir(), b.Dir(), "two servers must not share a data dir")
	require.NoError(t, a.Client(t).Set(ctx, "only-in-a", "1", 0).Err(), "SET on server a")
	n, err := b.Client(t).Exists(ctx, "only-in-a").Result()
	require.NoError(t, err, "EXISTS on server b")
	require.Zero(t, n, "a key written to server a must not appear on server b")
}

func TestArgsOverrideServerConfig(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := Start(t, Options{Args: []string{"--maxmemory", "10mb"}}).Client(t)

	got, err := c.ConfigGet(ctx, "maxmemory").Result()
	require.NoError(t, err, "CONFIG GET maxmemory")
	require.Equal(t, "10485760", got["maxmemory"], "maxmemory should be 10mb in bytes")

	save, err := c.ConfigGet(ctx, "save").Result()
	require.NoError(t, err, "CONFIG GET save")
	require.Empty(t, save["save"], "RDB snapshots should be off by default")
}

func TestPausedServerAnswersOnlyAfterResume(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := redis.NewClient(&redis.Options{
		Addr:        s.Addr(),
		ReadTimeout: 200 * time.Millisecond,
		MaxRetries:  -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err(), "PING before Pause")

	s.Pause(time.Minute)
	require.Error(t, c.Ping(ctx).Err(), "PING to a paused server should time out")

	s.Resume()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil },
		5*time.Second, 20*time.Millisecond, "PING should succeed after Resume")
}

func TestPauseResumesByItselfAfterDuration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t)
	c := s.Client(t)
	require.NoError(t, c.Ping(ctx).Err(), "PING before Pause")

	start := time.Now()
	s.Pause(300 * time.Millisecond)
	require.NoError(t, c.Ping(ctx).Err(), "PING should be answered once the pause ends")
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "PING answered during the pause")
}

func TestStartProcessRunsWithoutTestingTBAndCloseRemovesDir(t *testing.T) {
	t.Parallel()
	s, err := StartProcess(Options{})
	require.NoError(t, err, "StartProcess")
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer func() { _ = c.Close() }()
	require.NoError(t, c.Ping(t.Context()).Err(), "PING a StartProcess server")

	s.Close()
	s.Close() // idempotent

	_, err = os.Stat(s.Dir())
	require.ErrorIs(t, err, os.ErrNotExist, "Close should remove the data dir")
	require.Error(t, c.Ping(t.Context()).Err(), "PING after Close should fail")
	require.Error(t, s.restart(), "a closed server must not restart")
}

// Not parallel: it changes PATH for the whole process.
func TestStartProcessFailsWhenRedisServerIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(ServerEnv, "")

	_, err := StartProcess(Options{})

	require.ErrorContains(t, err, "redis-server not found on PATH")
}

func TestStartReportsLogTailWhenServerCannotStart(t *testing.T) {
	t.Parallel()
	bin, err := lookBinary()
	require.NoError(t, err, "redis-server on PATH")
	s := &Server{opts: Options{Args: []string{"--no-such-directive", "1"}}, bin: bin, dir: t.TempDir()}
	t.Cleanup(s.Close)

	err = s.startOnFreePort()

	require.ErrorContains(t, err, "no-such-directive", "the error should carry redis-server's complaint")
}

func TestLaunchReportsPortTakenByAnotherServer(t *testing.T) {
	t.Parallel()
	other := Start(t)
	bin, err := lookBinary()
	require.NoError(t, err, "redis-server on PATH")
	s := &Server{bin: bin, dir: t.TempDir(), port: other.port}
	t.Cleanup(s.Close)

	err = s.launch()

	require.ErrorIs(t, err, proctest.ErrPortTaken, "a second server on %s must not pass as ready", other.Addr())
	require.NoError(t, other.Client(t).Ping(t.Context()).Err(), "the server that owns the port keeps running")
}

// Not parallel: it changes the environment of the whole process.
func TestServerEnvNamesTheBinaryToLaunch(t *testing.T) {
	onPath, err := exec.LookPath(binaryName)
	require.NoError(t, err, "redis-server on PATH")
	t.Setenv("PATH", t.TempDir())
	t.Setenv(ServerEnv, onPath)

	s, err := StartProcess(Options{})

	require.NoError(t, err, "the binary named by %s should start without redis-server on PATH", ServerEnv)
	defer s.Close()
	require.NoError(t, s.Client(t).Ping(t.Context()).Err())
}

// Not parallel: it changes the environment of the whole process.
func TestServerEnvThatNamesNoExecutableIsAnError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "redis-server")
	t.Setenv(ServerEnv, missing)

	_, err := StartProcess(Options{})

	require.ErrorContains(t, err, ServerEnv+`="`+missing+`" is not an executable redis-server`)
}

func TestParseVersionReadsRedisAndValkey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		info string
		want Version
		str  string
	}{
		"Redis 7.0":           {"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", Version{"Redis", "7.0.15", 7, 0}, "Redis 7.0.15"},
		"Redis 8.0 milestone": {"redis_version:7.9.224\r\n", Version{"Redis", "7.9.224", 7, 9}, "Redis 7.9.224"},
		"Valkey 8.0":          {"redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", Version{"Valkey", "8.0.1", 7, 2}, "Valkey 8.0.1 (redis_version 7.2)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := ParseVersion(tc.info)
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			require.Equal(t, tc.str, v.String())
		})
	}
}

func TestParseVersionRejectsAReplyWithoutAVersion(t *testing.T) {
	t.Parallel()
	_, err := ParseVersion("# Server\r\nredis_mode:standalone\r\n")
	require.ErrorContains(t, err, "no redis_version")
	_, err = ParseVersion("redis_version:seven.two\r\n")
	require.ErrorContains(t, err, "not numeric")
}

func TestVersionAtLeastComparesMajorThenMinor(t *testing.T) {
	t.Parallel()
	v := Version{Product: "Redis", Major: 7, Minor: 2}
	require.True(t, v.AtLeast(7, 2))
	require.True(t, v.AtLeast(6, 9))
	require.False(t, v.AtLeast(7, 3))
	require.False(t, v.AtLeast(8, 0))
}

func TestVersionOfARunningServerIsItsOwn(t *testing.T) {
	t.Parallel()
	v := Start(t).Version(t)
	require.Contains(t, []string{"Redis", "Valkey"}, v.Product)
	require.GreaterOrEqual(t, v.Major, 7, "pelwarden needs XINFO GROUPS lag, from Redis 7.0")
}
