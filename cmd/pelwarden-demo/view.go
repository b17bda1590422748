package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

const (
	perReplica  = 5  // pendingEntriesCount
	maxReplicas = 10 // the ScaledObject's maxReplicaCount
)

// replicas is what the HPA asks for with a metric: ceil(metric/target),
// within 1 and maxReplicas.
func replicas(metric int64) int {
	return min(max(int(math.Ceil(float64(metric)/perReplica)), 1), maxReplicas)
}

// point is one sample of the counts.
type point struct {
	at time.Duration
	// naive is the XPENDING total that KEDA's redis-streams scaler uses;
	// stuck adds the entries pelwarden gave back, which without it would
	// still be pending under dead or degraded consumers; ours is
	// pelwarden's metric.
	naive, stuck, ours    int64
	rNaive, rStuck, rOurs int
}

// view samples Redis and pelwarden and draws what it sees.
type view struct {
	s     *scenario
	conn  *grpc.ClientConn
	keda  externalscaler.ExternalScalerClient
	admin pelwardenv1.AdminClient

	points    []point
	ghosts    map[string]bool
	degraded  map[string]bool
	seen      map[string]bool
	copies    int64
	processed int64
	lastDraw  time.Time
	shown     int // events already printed in plain mode
}

func newView(s *scenario, addr string) (*view, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &view{s: s, conn: conn, keda: externalscaler.NewExternalScalerClient(conn), admin: pelwardenv1.NewAdminClient(conn),
		ghosts: map[string]bool{}, degraded: map[string]bool{}, seen: map[string]bool{}}, nil
}

func (v *view) close() { _ = v.conn.Close() }

func (v *view) pendingOf(ctx context.Context, consumer string) int64 {
	p, err := v.s.rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return 0
	}
	return p.Consumers[consumer]
}

// sample reads both counts from one of pelwarden's reads of the group,
// notes what changed, and draws. The naive count is the XPENDING total of
// that read, what KEDA's redis-streams scaler counts; pelwarden's is the
// live part, what GetMetrics serves. It reports whether every job was
// produced and processed with nothing pending.
func (v *view) sample(ctx context.Context, at time.Duration) (bool, error) {
	// A poll as KEDA makes it keeps the target registered and fresh.
	res, err := v.keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{
		ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "demo", ScalerMetadata: trigger()}})
	if err != nil {
		return false, fmt.Errorf("GetMetrics: %w", err)
	}
	if len(res.GetMetricValues()) != 1 {
		return false, errors.New("GetMetrics returned no value")
	}
	t, err := v.target(ctx)
	if err != nil {
		return false, err
	}
	naive, ours := t.GetLivePending()+t.GetGhostPending()+t.GetDegradedPending(), t.GetLivePending()
	if v.processed, err = v.s.rdb.HLen(ctx, ledger).Result(); err != nil {
		return false, err
	}
	if err := v.noteChanges(ctx, t.GetConsumers()); err != nil {
		return false, err
	}
	stuck := naive + v.copies
	v.points = append(v.points, point{at: at, naive: naive, stuck: stuck, ours: ours,
		rNaive: replicas(naive), rStuck: replicas(stuck), rOurs: replicas(ours)})
	if time.Since(v.lastDraw) >= v.drawEvery() {
		v.lastDraw = time.Now()
		v.draw(at, t.GetConsumers())
	}
	pending, err := v.s.rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return false, err
	}
	return v.s.produced == v.s.o.jobs && v.processed == int64(v.s.o.jobs) && pending.Count == 0, nil
}

func (v *view) drawEvery() time.Duration {
	if v.s.o.plain {
		return time.Second
	}
	return 250 * time.Millisecond
}

// target is pelwarden's latest read of the group, judged.
func (v *view) target(ctx context.Context) (*pelwardenv1.Target, error) {
	res, err := v.admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListTargets: %w", err)
	}
	for _, t := range res.GetTargets() {
		if t.GetStream() == stream && t.GetGroup() == group && t.GetError() == "" {
			return t, nil
		}
	}
	return nil, errors.New("pelwarden has no good read of the group yet")
}

// noteChanges turns what changed since the last sample into events: a
// consumer judged Ghost or Degraded, or Alive again, entries requeued, a
// consumer gone.
func (v *view) noteChanges(ctx context.Context, consumers []*pelwardenv1.Consumer) error {
	now := map[string]bool{}
	for _, c := range consumers {
		now[c.GetName()] = true
		v.seen[c.GetName()] = true
		isDegraded := c.GetVerdict() == pelwardenv1.Verdict_VERDICT_DEGRADED
		switch {
		case isDegraded && !v.degraded[c.GetName()]:
			v.s.note(fmt.Sprintf("pelwarden judges %s Degraded holding %d entries: its heartbeat says it cannot work; its entries are left out and given back once stale", c.GetName(), c.GetPending()))
		case !isDegraded && v.degraded[c.GetName()] && c.GetVerdict() == pelwardenv1.Verdict_VERDICT_ALIVE:
			v.s.note(fmt.Sprintf("pelwarden judges %s Alive again", c.GetName()))
		}
		v.degraded[c.GetName()] = isDegraded
		if c.GetVerdict() == pelwardenv1.Verdict_VERDICT_GHOST && !v.ghosts[c.GetName()] {
			v.ghosts[c.GetName()] = true
			since := ""
			if at, ok := v.s.stopped[c.GetName()]; ok {
				since = fmt.Sprintf(" (%.1f s after it stopped)", time.Since(at).Seconds())
			}
			v.s.note(fmt.Sprintf("pelwarden judges %s a Ghost holding %d entries: no heartbeat for %d s%s", c.GetName(), c.GetPending(), heartbeatAge, since))
		}
	}
	for name := range v.seen {
		if !now[name] {
			delete(v.seen, name)
			v.s.note(name + "'s consumer is gone from the group (deleted with an empty PEL)")
		}
	}
	copies, err := countCopies(ctx, v.s.rdb)
	if err != nil {
		return err
	}
	if copies > v.copies {
		v.s.note(fmt.Sprintf("%d entries requeued; live workers pick them up", copies-v.copies))
		v.copies = copies
	}
	return nil
}

func (v *view) draw(at time.Duration, consumers []*pelwardenv1.Consumer) {
	p := v.points[len(v.points)-1]
	if v.s.o.plain {
		for ; v.shown < len(v.s.events); v.shown++ {
			e := v.s.events[v.shown]
			fmt.Printf("%5.1fs  ** %s\n", e.at.Seconds(), e.what)
		}
		fmt.Printf("%5.1fs  produced %d/%d processed %d requeued %d | XPENDING %d -> %d replicas (%d -> %d if never reclaimed) | pelwarden %d -> %d replicas\n",
			at.Seconds(), v.s.produced, v.s.o.jobs, v.processed, v.copies, p.naive, p.rNaive, p.stuck, p.rStuck, p.ours, p.rOurs)
		return
	}
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "pelwarden demo  %5.1f s   (Ctrl-C to stop)\n\n", at.Seconds())
	done := int(20 * v.processed / int64(v.s.o.jobs))
	fmt.Fprintf(&b, "progress  [%s%s]  produced %d/%d  processed %d  requeued %d\n\n",
		strings.Repeat("#", done), strings.Repeat("-", 20-done), v.s.produced, v.s.o.jobs, v.processed, v.copies)
	fmt.Fprintf(&b, "%-52s %8s %10s\n", "", "pending", "replicas")
	fmt.Fprintf(&b, "%-52s %8d %10d\n", "KEDA redis-streams scaler (XPENDING, ghosts included)", p.naive, p.rNaive)
	fmt.Fprintf(&b, "%-52s %8d %10d\n", "  the same if nothing had given ghost entries back", p.stuck, p.rStuck)
	fmt.Fprintf(&b, "%-52s %8d %10d\n\n", "pelwarden (ghost- and degraded-held entries left out)", p.ours, p.rOurs)
	fmt.Fprintf(&b, "%-10s %-8s %8s  %s\n", "consumer", "verdict", "pending", "heartbeat")
	sort.Slice(consumers, func(i, j int) bool { return consumers[i].GetName() < consumers[j].GetName() })
	for _, c := range consumers {
		hb := "-"
		if c.GetHeartbeatAgeMs() >= 0 {
			hb = fmt.Sprintf("%.1fs ago", float64(c.GetHeartbeatAgeMs())/1000)
		}
		verdict := strings.TrimPrefix(c.GetVerdict().String(), "VERDICT_")
		fmt.Fprintf(&b, "%-10s %-8s %8d  %s\n", c.GetName(), verdict, c.GetPending(), hb)
	}
	b.WriteString("\nevents\n")
	for _, e := range v.s.events {
		fmt.Fprintf(&b, "%6.1fs  %s\n", e.at.Seconds(), e.what)
	}
	fmt.Print(b.String())
}
