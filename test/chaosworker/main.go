// Command chaosworker is the worker process of the chaos suite: a small but
// honest Redis Streams consumer that heartbeats, processes entries, acks
// each one together with a ledger increment, leaves poison entries pending,
// and rides out Redis restarts. The suite SIGKILLs it at random and then
// checks the ledger, so every shortcut here would show up as a false alarm.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is everything one worker process needs; flags map onto it 1:1.
type config struct {
	// Mode is how the worker reaches Redis: standalone (Redis), cluster
	// (Addrs are seed nodes) or sentinel (Addrs are the sentinels of
	// MasterName), as pelwarden's own connection modes.
	Mode string
	// Redis is the server's host:port. Required in mode standalone.
	Redis string
	// Addrs are the seed nodes (cluster) or sentinels (sentinel). Required
	// in those modes.
	Addrs []string
	// MasterName is the sentinels' name of the master. Required in mode
	// sentinel.
	MasterName string
	// Stream and Group name the consumer group to read. Required; the group
	// must exist (the suite creates it, so a worker never races it).
	Stream, Group string
	// Consumer is this process's consumer name, unique per process (e.g.
	// worker-3-<pid>) so a restarted worker is a new consumer. Required.
	Consumer string
	// HeartbeatKey is the key pattern SET to the current Unix time in ms;
	// it must contain {consumer}, or all workers would share one key.
	HeartbeatKey string
	// HeartbeatEvery is the heartbeat period; must be > 0.
	HeartbeatEvery time.Duration
	// MinProcess and MaxProcess bound the simulated work time per entry;
	// 0 <= MinProcess <= MaxProcess.
	MinProcess, MaxProcess time.Duration
	// PoisonEvery marks entries whose job is a multiple of it as poison
	// (never acked); 0 means no poison. Must be >= 0.
	PoisonEvery int64
	// Ledger is the hash counting acked processings per job. Required.
	Ledger string
	// Count is XREADGROUP COUNT; must be > 0.
	Count int64
	// Block is XREADGROUP BLOCK; at least 1ms, since go-redis truncates to
	// whole ms and BLOCK 0 would block forever and ignore shutdown.
	Block time.Duration
	// ReadOwnPEL re-reads this consumer's PEL at start and after a failed
	// read before reading new entries.
	ReadOwnPEL bool
	// LogLevel is the slog level; per-entry lines are at debug.
	LogLevel slog.Level
}

func defaultConfig() config {
	return config{
		Mode:           "standalone",
		HeartbeatKey:   "hb:{consumer}",
		HeartbeatEvery: 200 * time.Millisecond,
		MinProcess:     5 * time.Millisecond,
		MaxProcess:     40 * time.Millisecond,
		Ledger:         "ledger",
		Count:          10,
		Block:          500 * time.Millisecond,
		ReadOwnPEL:     true,
		LogLevel:       slog.LevelInfo,
	}
}

// validate names the offending flag and what it accepts.
func (c config) validate() error {
	var errs []error
	required := []struct{ flag, value string }{
		{"stream", c.Stream}, {"group", c.Group}, {"consumer", c.Consumer}, {"ledger", c.Ledger},
	}
	switch c.Mode {
	case "standalone":
		required = append(required, struct{ flag, value string }{"redis", c.Redis})
	case "sentinel":
		required = append(required, struct{ flag, value string }{"sentinel-master", c.MasterName})
		fallthrough
	case "cluster":
		if len(c.Addrs) == 0 {
			errs = append(errs, fmt.Errorf("--redis-addrs is required in mode %s", c.Mode))
		}
	default:
		errs = append(errs, fmt.Errorf("--redis-mode %q: want standalone, sentinel or cluster", c.Mode))
	}
	for _, r := range required {
		if r.value == "" {
			errs = append(errs, fmt.Errorf("--%s is required", r.flag))
		}
	}
	if !strings.Contains(c.HeartbeatKey, "{consumer}") {
		errs = append(errs, fmt.Errorf("--heartbeat-key %q must contain {consumer}", c.HeartbeatKey))
	}
	if c.HeartbeatEvery <= 0 {
		errs = append(errs, fmt.Errorf("--heartbeat-every %s must be > 0", c.HeartbeatEvery))
	}
	if c.MinProcess < 0 || c.MaxProcess < c.MinProcess {
		errs = append(errs, fmt.Errorf("--min-process %s and --max-process %s must satisfy 0 <= min <= max", c.MinProcess, c.MaxProcess))
	}
	if c.PoisonEvery < 0 {
		errs = append(errs, fmt.Errorf("--poison-every %d must be >= 0 (0: no poison)", c.PoisonEvery))
	}
	if c.Count <= 0 {
		errs = append(errs, fmt.Errorf("--count %d must be > 0", c.Count))
	}
	if c.Block < time.Millisecond {
		errs = append(errs, fmt.Errorf("--block %s must be >= 1ms", c.Block))
	}
	return errors.Join(errs...)
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("chaosworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Mode, "redis-mode", cfg.Mode, "standalone, sentinel or cluster")
	fs.StringVar(&cfg.Redis, "redis", "", "Redis host:port (required in mode standalone)")
	fs.Func("redis-addrs", "comma-separated seed nodes (cluster) or sentinels (sentinel)", func(v string) error {
		cfg.Addrs = strings.Split(v, ",")
		return nil
	})
	fs.StringVar(&cfg.MasterName, "sentinel-master", "", "the sentinels' name of the master (mode sentinel)")
	fs.StringVar(&cfg.Stream, "stream", "", "stream key (required)")
	fs.StringVar(&cfg.Group, "group", "", "consumer group (required)")
	fs.StringVar(&cfg.Consumer, "consumer", "", "consumer name, unique per process (required)")
	fs.StringVar(&cfg.HeartbeatKey, "heartbeat-key", cfg.HeartbeatKey, "heartbeat key pattern containing {consumer}")
	fs.DurationVar(&cfg.HeartbeatEvery, "heartbeat-every", cfg.HeartbeatEvery, "heartbeat period")
	fs.DurationVar(&cfg.MinProcess, "min-process", cfg.MinProcess, "minimum simulated work per entry")
	fs.DurationVar(&cfg.MaxProcess, "max-process", cfg.MaxProcess, "maximum simulated work per entry")
	fs.Int64Var(&cfg.PoisonEvery, "poison-every", cfg.PoisonEvery, "jobs that are a multiple of this always fail (0: none)")
	fs.StringVar(&cfg.Ledger, "ledger", cfg.Ledger, "hash counting acked processings per job")
	fs.Int64Var(&cfg.Count, "count", cfg.Count, "XREADGROUP COUNT")
	fs.DurationVar(&cfg.Block, "block", cfg.Block, "XREADGROUP BLOCK")
	fs.BoolVar(&cfg.ReadOwnPEL, "read-own-pel", cfg.ReadOwnPEL, "process own pending entries first (at start and after a failed read)")
	fs.TextVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return cfg, cfg.validate()
}

func main() { os.Exit(cli(os.Args[1:], os.Stderr)) }

// cli maps flags to a config and the outcome of run to an exit code:
// 0 after a signal, 1 if work was left unfinished, 2 for bad flags.
func cli(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "chaosworker:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	redis.SetLogger(redisLog{log})
	if run(ctx, cfg, log.With("consumer", cfg.Consumer)) != nil {
		return 1
	}
	return 0
}

// redisLog sends go-redis's own unstructured lines (failed dials) to slog
// at debug: the retry loop already reports those failures, rate-limited.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}
