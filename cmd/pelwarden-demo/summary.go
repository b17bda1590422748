package main

import (
	"context"
	"fmt"
	"image/color"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// carryField marks a requeued copy: pelwarden's requeue writes the
// delivery count into it (deliveryCountField's default).
const carryField = "pelwarden-deliveries"

// countCopies counts the stream entries that are requeued copies.
func countCopies(ctx context.Context, rdb *redis.Client) (int64, error) {
	var n int64
	err := scanStream(ctx, rdb, func(m redis.XMessage) {
		if _, ok := m.Values[carryField]; ok {
			n++
		}
	})
	return n, err
}

func scanStream(ctx context.Context, rdb *redis.Client, each func(redis.XMessage)) error {
	start := "-"
	for {
		page, err := rdb.XRangeN(ctx, stream, start, "+", 1000).Result()
		if err != nil {
			return err
		}
		for _, m := range page {
			each(m)
		}
		if len(page) < 1000 {
			return nil
		}
		start = "(" + page[len(page)-1].ID
	}
}

// books is the end state, counted from Redis alone.
type books struct {
	produced, processed, processings, reclaimed, deadLettered, pending, lost int64
}

func countBooks(ctx context.Context, rdb *redis.Client) (books, error) {
	var b books
	jobs := map[string]bool{}
	err := scanStream(ctx, rdb, func(m redis.XMessage) {
		if _, ok := m.Values[carryField]; ok {
			b.reclaimed++
			return
		}
		if job, ok := m.Values["job"].(string); ok {
			jobs[job] = true
		}
	})
	if err != nil {
		return b, err
	}
	b.produced = int64(len(jobs))
	counts, err := rdb.HGetAll(ctx, ledger).Result()
	if err != nil {
		return b, err
	}
	b.processed = int64(len(counts))
	for job, c := range counts {
		n, _ := strconv.ParseInt(c, 10, 64)
		b.processings += n
		delete(jobs, job)
	}
	p, err := rdb.XPending(ctx, stream, group).Result()
	if err != nil {
		return b, err
	}
	b.pending = p.Count
	if b.deadLettered, err = rdb.XLen(ctx, stream+":dead").Result(); err != nil {
		return b, err
	}
	b.lost = int64(len(jobs)) - b.pending
	return b, nil
}

// finish prints the summary and writes the chart; it reports whether the
// books balance: every job processed once, nothing pending, nothing lost.
func (v *view) finish(ctx context.Context) (bool, error) {
	b, err := countBooks(ctx, v.s.rdb)
	if err != nil {
		return false, err
	}
	var naiveRS, stuckRS, ourRS float64
	for i := 1; i < len(v.points); i++ {
		dt := (v.points[i].at - v.points[i-1].at).Seconds()
		naiveRS += float64(v.points[i-1].rNaive) * dt
		stuckRS += float64(v.points[i-1].rStuck) * dt
		ourRS += float64(v.points[i-1].rOurs) * dt
	}
	fmt.Printf("\nsummary after %.1f s, counted from Redis:\n", v.s.end.Sub(v.s.started).Seconds())
	fmt.Printf("  produced      %d jobs\n", b.produced)
	fmt.Printf("  processed     %d jobs (%d processings: %d duplicates)\n", b.processed, b.processings, b.processings-b.processed)
	fmt.Printf("  reclaimed     %d entries requeued from the killed worker, the degraded one and the departing one\n", b.reclaimed)
	fmt.Printf("  dead-lettered %d\n", b.deadLettered)
	fmt.Printf("  pending       %d\n", b.pending)
	fmt.Printf("  lost          %d\n", b.lost)
	fmt.Printf("  replica-seconds asked for: pelwarden's count %.0f, XPENDING %.0f, XPENDING if nothing had reclaimed %.0f\n", ourRS, naiveRS, stuckRS)
	if v.s.o.chart != "" {
		if err := v.chart(v.s.o.chart); err != nil {
			return false, err
		}
		fmt.Printf("  chart         %s\n", v.s.o.chart)
	}
	ok := b.lost == 0 && b.pending == 0 && b.processed == b.produced && b.processings == b.processed && b.produced == int64(v.s.o.jobs)
	if !ok {
		fmt.Println("  the books do not balance: see above")
	}
	return ok, nil
}

// chart draws the replicas each count asks for over time, with the
// scenario's events marked.
func (v *view) chart(path string) error {
	p := plot.New()
	p.Title.Text = "Replicas the HPA would ask for (pendingEntriesCount 5, max 10)"
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "replicas"
	p.Y.Min, p.Y.Max = 0, maxReplicas+5
	p.Add(plotter.NewGrid())
	series := []struct {
		name  string
		value func(point) int
		dash  []vg.Length
	}{
		{"XPENDING if nothing gave ghost and degraded entries back (KEDA's scaler alone)", func(pt point) int { return pt.rStuck }, []vg.Length{vg.Points(2), vg.Points(2)}},
		{"XPENDING, ghosts and degraded included (KEDA's redis-streams scaler)", func(pt point) int { return pt.rNaive }, nil},
		{"pelwarden (ghost- and degraded-held entries left out)", func(pt point) int { return pt.rOurs }, []vg.Length{vg.Points(6), vg.Points(3)}},
	}
	for i, sr := range series {
		xys := make(plotter.XYs, len(v.points))
		for j, pt := range v.points {
			xys[j] = plotter.XY{X: pt.at.Seconds(), Y: float64(sr.value(pt))}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Width, l.Dashes, l.Color = vg.Points(2), sr.dash, plotColor(i)
		p.Add(l)
		p.Legend.Add(sr.name, l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	var at plotter.XYLabels
	for i, m := range v.s.marks() {
		line, err := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: 0}, {X: m.at.Seconds(), Y: maxReplicas + 1.5}})
		if err != nil {
			return err
		}
		line.Color, line.Dashes = plotColor(3), []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(line)
		// Neighboring labels alternate in height so they never overlap.
		at.XYs = append(at.XYs, plotter.XY{X: m.at.Seconds(), Y: maxReplicas + 1 - 0.6*float64(i%2)})
		at.Labels = append(at.Labels, " "+m.label)
	}
	labels, err := plotter.NewLabels(at)
	if err != nil {
		return err
	}
	p.Add(labels)
	if err := p.Save(10*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	return nil
}

// mark is one event of the scenario on the chart.
type mark struct {
	at    time.Duration
	label string
}

// marks are the times of the kill, the degraded spell, the new pod and the
// graceful stop.
func (s *scenario) marks() []mark {
	kill, degraded := killAt, degradeAt
	if at, ok := s.stopped["worker-b"]; ok {
		kill = at.Sub(s.started)
	}
	if s.degradedAt > 0 {
		degraded = s.degradedAt
	}
	return []mark{{kill, "SIGKILL"}, {degraded, "degraded"}, {replaceAt, "new pod"}, {recoverAt, "quota back"}, {shutdownAt, "SIGTERM"}}
}

// plotColor picks colors that stay apart for the color-blind: red,
// blue, orange, and grey for the event marks.
func plotColor(i int) color.Color {
	return []color.Color{
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff},
	}[i]
}
