package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// floodCPUs are the CPUs of a flood run: pelwarden's (with its Redis, API
// server, the legitimate poll and the producer) and the attacker's; -1
// where nothing is pinned.
type floodCPUs struct{ pelwarden, attacker int }

// pinFlood keeps this process, and so every process it starts, to the
// first CPU it may use, and leaves the second for the attacker; it gives
// the process its CPUs back when b ends. With one CPU nothing is pinned.
func pinFlood(b *testing.B) floodCPUs {
	b.Helper()
	cpus, err := allowedCPUs()
	if err != nil || len(cpus) < 2 {
		b.Logf("the flood and pelwarden share the CPUs (%v, CPUs %v)", err, cpus)
		return floodCPUs{pelwarden: -1, attacker: -1}
	}
	restore, err := pinProcess(cpus[0])
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := restore(); err != nil {
			b.Error(err)
		}
	})
	return floodCPUs{pelwarden: cpus[0], attacker: cpus[1]}
}

// check fails b unless every thread of process pid keeps to cpu.
func (floodCPUs) check(b *testing.B, name string, pid, cpu int) {
	b.Helper()
	if cpu < 0 {
		return
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("%s's threads: %v", name, err)
	}
	for _, t := range tasks {
		status, err := os.ReadFile(t)
		if err != nil {
			continue // the thread has exited
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != strconv.Itoa(cpu) {
				b.Fatalf("%s's thread %s runs on CPUs %s, want only %d", name, filepath.Base(filepath.Dir(t)), strings.TrimSpace(v), cpu)
			}
		}
	}
}

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// procCPU is the CPU time, user and system, process pid has used.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces and parentheses:
	// count from after the last one.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}
