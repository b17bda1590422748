package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// redisCPUs is the CPU each server has used, user and system, in seconds
// (INFO cpu: every thread of the server).
func redisCPUs(b *testing.B, rdbs [3]*redis.Client) [3]float64 {
	b.Helper()
	var out [3]float64
	for i, rdb := range rdbs {
		info, err := rdb.Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			name, v, _ := strings.Cut(line, ":")
			if name != "used_cpu_sys" && name != "used_cpu_user" {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %q", line)
			}
			out[i] += f
		}
	}
	return out
}

// costCommands is the commands pelwarden's and the built-in's servers have
// run, INFO and the workers' heartbeats (SET) left out.
func costCommands(b *testing.B, rdbs [3]*redis.Client) [2]int64 {
	b.Helper()
	var out [2]int64
	for i := range out {
		by, total := redistest.CallsSince(nil, redistest.CommandCalls(b, rdbs[i]))
		out[i] = total - by["set"]
	}
	return out
}

// scrapeText is a /metrics page.
func scrapeText(b *testing.B, url string) string {
	b.Helper()
	resp, err := http.Get(url) //nolint:noctx // a benchmark's scrape of its own server
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return string(body)
}

// series are the values on a page of every series of a family, by their
// label text; a page without the family has none.
func series(page, family string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.SplitSeq(page, "\n") {
		rest, ok := strings.CutPrefix(line, family)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(rest[:i])] = v
	}
	return out
}

// counterDelta is how much an unlabelled counter of a family rose
// between two pages.
func counterDelta(before, after, family string) float64 {
	return series(after, family)[""] - series(before, family)[""]
}

// ageQuantiles are quantiles of the answers' ages, in seconds.
type ageQuantiles struct {
	ok            bool
	p50, p99, max float64
}

// answerAges are the quantiles of the ages of the reads answers came
// from between two scrapes, each the upper bound of the histogram's
// bucket it falls in (pelwarden_scaler_answer_age_seconds); not ok from
// a build without the histogram.
func answerAges(before, after string) ageQuantiles {
	b0, b1 := series(before, "pelwarden_scaler_answer_age_seconds_bucket"), series(after, "pelwarden_scaler_answer_age_seconds_bucket")
	type bucket struct{ le, n float64 }
	var bs []bucket
	for labels, n := range b1 {
		le, _ := strings.CutPrefix(labels, `{le="`)
		bound, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le: bound, n: n - b0[labels]})
	}
	slices.SortFunc(bs, func(x, y bucket) int { return cmpFloat(x.le, y.le) })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return ageQuantiles{}
	}
	total := bs[len(bs)-1].n
	at := func(q float64) float64 {
		for _, x := range bs {
			if x.n >= q*total {
				return x.le
			}
		}
		return math.Inf(1)
	}
	return ageQuantiles{ok: true, p50: at(0.5), p99: at(0.99), max: at(1)}
}

// sampledAges are the quantiles of the ages of every target's snapshot
// (pelwarden_snapshot_age_seconds) over samples scrapes a period apart:
// the answers' ages of a build that served polls from snapshots it
// refreshed in the background whatever the polls, which a poll meets at
// any moment alike.
func sampledAges(b *testing.B, url string, samples int, period time.Duration) ageQuantiles {
	b.Helper()
	var ages []float64
	for i := range samples {
		if i > 0 {
			time.Sleep(period)
		}
		for _, v := range series(scrapeText(b, url), "pelwarden_snapshot_age_seconds") {
			ages = append(ages, v)
		}
	}
	if len(ages) == 0 {
		return ageQuantiles{}
	}
	slices.Sort(ages)
	at := func(q float64) float64 { return ages[int(q*float64(len(ages)-1))] }
	return ageQuantiles{ok: true, p50: at(0.5), p99: at(0.99), max: at(1)}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readsByCause are pelwarden's reads of groups between two scrapes, by
// what asked for them, and the round trips that carried them.
func readsByCause(before, after string) (map[string]float64, float64) {
	r0, r1 := series(before, "pelwarden_group_reads_total"), series(after, "pelwarden_group_reads_total")
	out := map[string]float64{}
	for labels, n := range r1 {
		cause := strings.TrimSuffix(strings.TrimPrefix(labels, `{cause="`), `"}`)
		out[cause] = n - r0[labels]
	}
	c0, c1 := series(before, "pelwarden_group_read_batch_size_count"), series(after, "pelwarden_group_read_batch_size_count")
	return out, c1[""] - c0[""]
}

// saveProfiles writes, for go tool pprof and go tool trace, pelwarden's
// CPU profile over d, what it allocated over d, its live heap at the
// window's start (collected first), and an execution trace of the
// window's first seconds, whose scheduling profile (go tool trace
// -pprof=sched) shows where calls waited for a CPU
// (PELWARDEN_BENCH_COST_PROFILE=<dir>; pelwarden then serves its
// profiles, which it does not as deployed).
func saveProfiles(b *testing.B, base string, d time.Duration, dir, name string) {
	b.Helper()
	secs := int(d.Seconds())
	saves := []struct{ path, file string }{
		{fmt.Sprintf("profile?seconds=%d", secs), "profile-" + name + ".pb.gz"},
		{fmt.Sprintf("allocs?seconds=%d", secs), "allocs-" + name + ".pb.gz"},
		{"heap?gc=1", "heap-" + name + ".pb.gz"},
		{fmt.Sprintf("trace?seconds=%d", min(secs, 4)), "trace-" + name + ".out"},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(saves))
	for i, s := range saves {
		wg.Go(func() {
			errs[i] = saveProfile(base+"/debug/pprof/"+s.path, filepath.Join(dir, s.file))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

func saveProfile(url, path string) error {
	resp, err := http.Get(url) //nolint:noctx // a benchmark's read of its own server
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return os.WriteFile(path, body, 0o600)
}
