package bench

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// allowedCPUs are the CPUs this process may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for cpu := 0; len(cpus) < set.Count(); cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

// pinProcess puts every thread of this process on cpus, and returns how
// to give them back the set they had. Affinity belongs to a thread, and a
// Go process has several: each is set, and the threads the runtime starts
// meanwhile are found by looking again until none is left, since a new
// thread takes the set of the one that started it. Children started
// afterwards inherit it.
func pinProcess(cpus ...int) (restore func() error, err error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Zero()
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	return func() error { return setProcessAffinity(old) }, setProcessAffinity(set)
}

// setProcessAffinity gives every thread of this process set.
func setProcessAffinity(set unix.CPUSet) error {
	for range 10 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		changed := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if unix.SchedGetaffinity(tid, &cur) == nil && cur == set {
				continue
			}
			// A thread that has exited since the listing is no matter.
			if err := unix.SchedSetaffinity(tid, &set); err == nil {
				changed = true
			}
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("threads of this process kept starting with another CPU set")
}
