// Command pelwarden-demo runs a throwaway redis-server and pelwarden with a
// consumer group in which three workers are alive and two have died holding
// entries, and shows KEDA's naive pending count next to pelwarden's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	stream, group = "jobs", "workers"
	target        = 3 // pendingEntriesCount: entries per replica
)

var (
	live   = []string{"worker-7f9c-abcde", "worker-7f9c-fghij", "worker-7f9c-klmno"}
	ghosts = []string{"worker-5d2a-oomkilled", "worker-5d2a-evicted"}
)

func main() { os.Exit(run()) }

func run() int {
	duration := flag.Duration("duration", 15*time.Second, "how long to run before exiting (0: until Ctrl-C)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := demo(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context) error {
	srv, err := redistest.StartProcess(redistest.Options{})
	if err != nil {
		return err
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = rdb.Close() }()
	if err := seed(ctx, rdb); err != nil {
		return err
	}

	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Scaler.RefreshInterval = 500 * time.Millisecond
	cfg.Redis = []config.Redis{config.DefaultRedis("default", srv.Addr())}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	runCtx, stopApp := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		stopApp()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "pelwarden:", err)
		}
	}()

	md := map[string]string{
		"stream": stream, "consumerGroup": group, "pendingEntriesCount": strconv.Itoa(target),
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "3",
	}
	fmt.Printf("redis-server  %s   (stream %q, group %q)\n", srv.Addr(), stream, group)
	fmt.Printf("pelwarden     gRPC %s   metrics http://%s/metrics\n\n", a.GRPCAddr(), a.HTTPAddr())
	fmt.Println("Query it like KEDA does (grpcurl needs no proto files: reflection is on):")
	fmt.Printf("  grpcurl -plaintext -d '{\"scaledObjectRef\":{\"scalerMetadata\":{\"stream\":%q,\"consumerGroup\":%q,\"pendingEntriesCount\":\"%d\",\"liveness\":\"heartbeat\",\"heartbeatKey\":\"hb:{consumer}\",\"heartbeatMaxAgeSeconds\":\"3\"}}}' %s externalscaler.ExternalScaler/GetMetrics\n",
		stream, group, target, a.GRPCAddr())
	fmt.Printf("  grpcurl -plaintext %s pelwarden.v1.Admin/ListTargets\n", a.GRPCAddr())
	fmt.Printf("  grpcurl -plaintext -d '{\"target\":{\"stream\":%q,\"group\":%q}}' %s pelwarden.v1.Admin/DescribeTarget\n", stream, group, a.GRPCAddr())
	fmt.Printf("  grpcurl -plaintext -d '{\"target\":{\"stream\":%q,\"group\":%q}}' %s pelwarden.v1.Admin/Plan\n\n", stream, group, a.GRPCAddr())
	fmt.Printf("3 workers heartbeat and hold 9 entries; 2 died holding 40. Ghosts are called after 3 s without a heartbeat or a read.\n\n")
	fmt.Printf("%6s  %-28s  %-28s\n", "t", "KEDA redis-streams (XPENDING)", "pelwarden (live pending)")

	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	keda := externalscaler.NewExternalScalerClient(conn)
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, w := range live {
			if err := rdb.Set(ctx, "hb:"+w, time.Now().UnixMilli(), 0).Err(); err != nil && ctx.Err() == nil {
				return err
			}
		}
		if err := show(ctx, rdb, keda, md, time.Since(start)); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			fmt.Println("\ndone: pelwarden leaves the ghosts' 40 entries out, so KEDA asks for the replicas live work needs.")
			return nil
		case <-tick.C:
		}
	}
}

func seed(ctx context.Context, rdb *redis.Client) error {
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil {
		return err
	}
	for i := range 49 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", i}}).Err(); err != nil {
			return err
		}
	}
	read := func(consumer string, n int64) error {
		return rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: n, Block: -1}).Err()
	}
	for _, g := range ghosts {
		if err := read(g, 20); err != nil {
			return err
		}
	}
	for _, w := range live {
		if err := read(w, 3); err != nil {
			return err
		}
	}
	return nil
}

func show(ctx context.Context, rdb *redis.Client, keda externalscaler.ExternalScalerClient, md map[string]string, at time.Duration) error {
	naive, err := rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return err
	}
	res, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{ScalerMetadata: md}})
	if err != nil {
		return err
	}
	if len(res.GetMetricValues()) != 1 {
		return errors.New("GetMetrics returned no value")
	}
	ours := res.GetMetricValues()[0].GetMetricValue()
	fmt.Printf("%5.0fs  %3d pending -> %2d replicas    %3d pending -> %2d replicas\n",
		at.Seconds(), naive.Count, replicas(naive.Count), ours, replicas(ours))
	return nil
}

func replicas(v int64) int64 { return int64(math.Ceil(float64(v) / target)) }
