package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/proctest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// The flood's attacker is this test binary run again in a process of its
// own: floodAttackerEnv names the class it sends, floodAddrEnv
// pelwarden's gRPC address and floodCPUEnv the CPU it keeps to.
const (
	floodAttackerEnv = "PELWARDEN_BENCH_FLOOD_ATTACKER"
	floodAddrEnv     = "PELWARDEN_BENCH_FLOOD_ADDR"
	floodCPUEnv      = "PELWARDEN_BENCH_FLOOD_CPU"
)

func TestMain(m *testing.M) {
	if class := os.Getenv(floodAttackerEnv); class != "" {
		if err := runFloodAttacker(class, os.Getenv(floodAddrEnv), os.Getenv(floodCPUEnv), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "flood attacker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// floodCounts are what every caller of one attacker shares: the run's
// size, a fresh number for each new name, and the calls sent and refused.
type floodCounts struct {
	size           floodSize
	next           atomic.Int64
	calls, refused atomic.Int64
}

// stranger is one flood caller, without credentials, on a connection of
// its own.
type stranger struct {
	*floodCounts
	id    int
	keda  externalscaler.ExternalScalerClient
	admin pelwardenv1.AdminClient
}

// count records one flood call, and whether pelwarden refused it.
func (s *stranger) count(err error) {
	s.calls.Add(1)
	if err != nil {
		s.refused.Add(1)
	}
}

// fresh is a name never sent before.
func (s *stranger) fresh(prefix string) string {
	return prefix + strconv.FormatInt(s.next.Add(1), 10)
}

// runFloodAttacker is the attacker process: it keeps to its CPU, runs the
// class's callers, and answers each line on in with the calls sent and
// refused so far; when in closes it stops its callers and returns.
func runFloodAttacker(class, addr, cpu string, in io.Reader, out io.Writer) error {
	c, ok := floodClassNamed(class)
	if !ok {
		return fmt.Errorf("no flood class %q", class)
	}
	if cpu != "" {
		n, err := strconv.Atoi(cpu)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", floodCPUEnv, cpu, err)
		}
		if _, err := pinProcess(n); err != nil {
			return err
		}
		runtime.GOMAXPROCS(1) // one core of its own
	}
	counts := &floodCounts{size: floodScale()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range c.callers {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			cancel()
			return err
		}
		defer func() { _ = conn.Close() }()
		s := &stranger{floodCounts: counts, id: i,
			keda: externalscaler.NewExternalScalerClient(conn), admin: pelwardenv1.NewAdminClient(conn)}
		wg.Go(func() { c.flood(ctx, s) })
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		if _, err := fmt.Fprintf(out, "%d %d\n", counts.calls.Load(), counts.refused.Load()); err != nil {
			break
		}
	}
	cancel()
	wg.Wait()
	return nil
}

// floodAttacker is the attacker process seen from the benchmark.
type floodAttacker struct {
	proc *proctest.Child
	in   io.WriteCloser
	out  *bufio.Reader
	log  string
}

// startFloodAttacker runs the class's callers in a process of their own,
// kept to cpu (none: -1).
func startFloodAttacker(b *testing.B, class, addr string, cpu int) *floodAttacker {
	b.Helper()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	a := &floodAttacker{log: filepath.Join(b.TempDir(), "attacker.log")}
	logFile, err := os.Create(a.log)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = logFile.Close() }() // the child holds its own copy
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), floodAttackerEnv+"="+class, floodAddrEnv+"="+addr)
	if cpu >= 0 {
		cmd.Env = append(cmd.Env, floodCPUEnv+"="+strconv.Itoa(cpu))
	}
	cmd.Stderr = logFile
	if a.in, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	a.out = bufio.NewReader(stdout)
	if a.proc, err = proctest.Run(cmd); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.proc.Kill)
	return a
}

// counts are the calls the attacker has sent and had refused so far.
func (a *floodAttacker) counts(b *testing.B) (calls, refused int64) {
	b.Helper()
	if _, err := io.WriteString(a.in, "\n"); err != nil {
		b.Fatalf("flood attacker: %v\n%s", err, a.tail())
	}
	line, err := a.out.ReadString('\n')
	if err == nil {
		_, err = fmt.Sscanf(line, "%d %d", &calls, &refused)
	}
	if err != nil {
		b.Fatalf("flood attacker: %v\n%s", err, a.tail())
	}
	return calls, refused
}

// stop ends the attacker's callers and waits for the process, which
// it kills if its calls do not end.
func (a *floodAttacker) stop() {
	_ = a.in.Close()
	select {
	case <-a.proc.Done():
	case <-time.After(10 * time.Second):
		a.proc.Kill()
	}
}

// tail is the end of the attacker's log, for failure messages.
func (a *floodAttacker) tail() string {
	b, err := os.ReadFile(a.log)
	if err != nil {
		return err.Error()
	}
	return "attacker:\n  " + strings.ReplaceAll(strings.TrimRight(proctest.LastLines(string(b), 20), "\n"), "\n", "\n  ")
}
