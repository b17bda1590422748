// Command pelwarden-demo shows, on one machine in under a minute, what
// pelwarden does. It starts a throwaway redis-server, pelwarden, a
// producer and a few example workers (examples/worker, as real processes),
// then SIGKILLs a worker in the middle of its jobs, has another report
// itself degraded for a while (its heartbeat says so), and later stops a
// third one gracefully. A live view shows KEDA's naive pending count next
// to pelwarden's, the replicas each would ask for, the ghost and the
// degraded worker being detected and their entries coming back. It ends with a summary counted from Redis and a
// PNG chart of the replicas over time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	var o options
	flag.IntVar(&o.jobs, "jobs", 300, "jobs the producer adds over 20 s")
	flag.DurationVar(&o.limit, "limit", 60*time.Second, "end the demo after this long, done or not")
	flag.StringVar(&o.chart, "chart", "pelwarden-demo.png", "where to write the chart of replicas over time (empty: no chart)")
	flag.BoolVar(&o.plain, "plain", false, "print one line per second instead of redrawing the view")
	flag.Parse()
	if o.jobs < 1 || o.limit < 10*time.Second {
		fmt.Fprintln(os.Stderr, "demo: -jobs must be at least 1 and -limit at least 10s")
		return 2
	}
	if !o.plain {
		o.plain = !isTerminal(os.Stdout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := demo(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

type options struct {
	jobs  int
	limit time.Duration
	chart string
	plain bool
}

func isTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
