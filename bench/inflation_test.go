package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// The scaling-inflation scenario runs on an accelerated clock: one tick is
// one simulated second, inflationTick of real time, and heartbeats expire
// after heartbeatTicks.
const (
	inflationTicks   = 120
	inflationTick    = 200 * time.Millisecond
	inflationTarget  = 5  // pendingEntriesCount
	inflationWorkers = 4  // live workers holding the live work
	ghostHeld        = 25 // entries a dying worker holds
	heartbeatTicks   = 5  // heartbeatMaxAgeSeconds, in ticks
	// settleTicks after a change pelwarden must report exactly the live
	// work: the heartbeat max age plus refreshes, with room for a slow tick.
	settleTicks = heartbeatTicks + 3
)

// inflationHPA is the HPA both metrics feed: target 5, 1..50 replicas.
var inflationHPA = HPA{Target: inflationTarget, Min: 1, Max: 50, Tolerance: DefaultHPATolerance}

// liveWork is the script: the entries live workers hold at tick t.
func liveWork(t int) int {
	switch {
	case t < 30:
		return 20
	case t < 60:
		return 40
	case t < 90:
		return 15
	default:
		return 10
	}
}

// deathTicks are when a worker dies holding ghostHeld entries.
var deathTicks = []int{10, 25, 45, 70, 95}

// lastChange is the latest tick <= t at which the script changed the live
// work or a worker died.
func lastChange(t int) int {
	last := 0
	for s := 1; s <= t; s++ {
		if liveWork(s) != liveWork(s-1) || slices.Contains(deathTicks, s) {
			last = s
		}
	}
	return last
}

// hpaTally follows one HPA fed by one metric, in replica-seconds.
type hpaTally struct {
	current               int32
	asked, wasted, missed float64
}

func (h *hpaTally) step(metric int64, need int32) {
	h.current = inflationHPA.Desired(float64(metric), h.current)
	h.asked += float64(h.current)
	h.wasted += float64(max(0, h.current-need))
	h.missed += float64(max(0, need-h.current))
}

// BenchmarkScalingInflation plays the script against real Redis: live
// workers keep working and heartbeating while workers die one by one and
// their ghosts keep holding entries (hygiene off). Every tick it samples
// pelwarden's metric (GetMetrics through KEDA's client) and the
// all-consumers XPENDING count KEDA's redis-streams scaler scales on,
// applies the HPA rule to each, and tallies the replica-seconds each asked
// for against what the live work needs: ceil(live entries / target)
// clamped to the HPA's bounds. It fails if XPENDING ever differs from the
// script, or pelwarden's metric differs from the live work once a change
// has had settleTicks to show.
func BenchmarkScalingInflation(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	c := startApp(b, srv.Addr(), func(cfg *config.Config) {
		cfg.Scaler.Freshness = 100 * time.Millisecond
		// The operator lets triggers name the workers' heartbeat keys.
		cfg.Triggers.Rules[0].HeartbeatKeys = []string{"hb:*"}
	})
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{ScalerMetadata: map[string]string{
		"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": strconv.Itoa(inflationTarget), "reclaim": "off",
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": strconv.FormatFloat((heartbeatTicks * inflationTick).Seconds(), 'f', -1, 64),
	}}}
	var pw, keda hpaTally
	var needed float64
	for b.Loop() {
		sim := &inflationSim{b: b, rdb: rdb, held: make([][]string, inflationWorkers)}
		start := inflationHPA.Desired(float64(liveWork(0)), 0)
		pw, keda, needed = hpaTally{current: start}, hpaTally{current: start}, 0
		next := time.Now()
		for t := range inflationTicks {
			sim.tick(t)
			next = next.Add(inflationTick)
			time.Sleep(time.Until(next))
			metric, xpending := sim.sample(c, req)
			sim.check(t, metric, xpending)
			need := inflationHPA.Desired(float64(liveWork(t)), 0)
			needed += float64(need)
			pw.step(metric, need)
			keda.step(xpending, need)
		}
	}
	b.ReportMetric(needed, "needed-replica-s")
	b.ReportMetric(pw.asked, "pelwarden-replica-s")
	b.ReportMetric(keda.asked, "xpending-replica-s")
	b.ReportMetric(pw.wasted, "pelwarden-wasted-replica-s")
	b.ReportMetric(keda.wasted, "xpending-wasted-replica-s")
	b.ReportMetric(pw.missed, "pelwarden-short-replica-s")
	b.ReportMetric(keda.missed, "xpending-short-replica-s")
	b.ReportMetric(float64(len(deathTicks)*ghostHeld), "ghost-entries")
	b.ReportMetric(float64(len(deathTicks)), "deaths")
	b.ReportMetric(inflationTicks, "simulated-s")
	b.ReportMetric(inflationTarget, "target")
}

// inflationSim keeps the script's state in Redis: held[i] are the entry
// IDs live worker i holds, oldest first.
type inflationSim struct {
	b      *testing.B
	rdb    *redis.Client
	held   [][]string
	deaths int
}

// tick applies tick t: every live worker finishes its oldest entry and
// takes a new one (in one pipeline, so the count never dips), the live
// work moves to the script's level, a worker dies if the script says so,
// and live workers heartbeat.
func (s *inflationSim) tick(t int) {
	ctx := context.Background()
	want, workers := liveWork(t), len(s.held)
	pipe := s.rdb.TxPipeline() // one MULTI/EXEC: a refresh sees all of a tick or none
	reads := make([]*redis.XStreamSliceCmd, workers)
	for i, h := range s.held {
		share := want / workers
		if i < want%workers {
			share++
		}
		ack := max(min(1, len(h)), len(h)-share) // finish the oldest, and any above the share
		if ack > 0 {
			pipe.XAck(ctx, "jobs", "workers", h[:ack]...)
			s.held[i] = h[ack:]
		}
		if take := share - len(s.held[i]); take > 0 {
			reads[i] = s.take(ctx, pipe, fmt.Sprintf("live-%d", i), take)
		}
	}
	now := time.Now().UnixMilli()
	for i := range s.held {
		pipe.Set(ctx, fmt.Sprintf("hb:live-%d", i), now, 0)
	}
	if slices.Contains(deathTicks, t) {
		s.deaths++
		dead := fmt.Sprintf("dead-%d", s.deaths)
		pipe.Set(ctx, "hb:"+dead, now, 0) // alive until this moment
		s.take(ctx, pipe, dead, ghostHeld)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.b.Fatalf("tick %d: %v", t, err)
	}
	for i, r := range reads {
		if r != nil {
			for _, m := range r.Val()[0].Messages {
				s.held[i] = append(s.held[i], m.ID)
			}
		}
	}
}

// take queues n new entries and their delivery to consumer.
func (s *inflationSim) take(ctx context.Context, pipe redis.Pipeliner, consumer string, n int) *redis.XStreamSliceCmd {
	for range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", consumer}})
	}
	return pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: int64(n), Block: -1})
}

func (s *inflationSim) sample(c externalscaler.ExternalScalerClient, req *externalscaler.GetMetricsRequest) (metric, xpending int64) {
	ctx := context.Background()
	res, err := c.GetMetrics(ctx, req)
	if err != nil {
		s.b.Fatalf("GetMetrics: %v", err)
	}
	p, err := s.rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil {
		s.b.Fatalf("XPENDING: %v", err)
	}
	return res.GetMetricValues()[0].GetMetricValue(), p.Count
}

func (s *inflationSim) check(t int, metric, xpending int64) {
	live, ghosts := int64(liveWork(t)), int64(s.deaths*ghostHeld)
	if xpending != live+ghosts {
		s.b.Fatalf("tick %d: XPENDING counts %d, the script holds %d live + %d ghost", t, xpending, live, ghosts)
	}
	if t-lastChange(t) >= settleTicks && metric != live {
		s.b.Fatalf("tick %d: pelwarden reports %d, want the %d live entries (%d ghost-held left out)", t, metric, live, ghosts)
	}
}
