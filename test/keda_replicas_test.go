//go:build kube

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// replicaLog samples spec.replicas of Deployments and keeps each change.
type replicaLog struct {
	mu     sync.Mutex
	names  []string
	rows   []replicaRow
	errors int
}

type replicaRow struct {
	at       time.Time
	name     string
	replicas int32
}

func startReplicaLog(t *testing.T, e *kedaEnv, namespace string, names ...string) *replicaLog {
	t.Helper()
	l := &replicaLog{names: names}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]int32{}
		for {
			for _, name := range names {
				n, err := e.replicas(namespace, name)
				l.mu.Lock()
				if err != nil {
					l.errors++
				} else if prev, seen := last[name]; !seen || prev != n {
					last[name] = n
					l.rows = append(l.rows, replicaRow{at: time.Now(), name: name, replicas: n})
				}
				l.mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return l
}

// now is each Deployment's latest replicas.
func (l *replicaLog) now() map[string]int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int32{}
	for _, r := range l.rows {
		out[r.name] = r.replicas
	}
	return out
}

// since returns the changes of name after from, with the value it had at
// from first.
func (l *replicaLog) since(name string, from time.Time) []replicaRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []replicaRow
	for _, r := range l.rows {
		switch {
		case r.name != name:
		case r.at.Before(from):
			out = []replicaRow{{at: from, name: name, replicas: r.replicas}}
		default:
			out = append(out, r)
		}
	}
	return out
}

// reached returns when name first had want after from.
func (l *replicaLog) reached(name string, want int32, from time.Time) (time.Time, bool) {
	for _, r := range l.since(name, from) {
		if r.replicas == want {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// table prints every Deployment's replicas from a moment on: one line per
// Deployment, each change as replicas@seconds.
func (l *replicaLog) table(from time.Time) string {
	var b strings.Builder
	for _, name := range l.names {
		fmt.Fprintf(&b, "  %-12s", name)
		for _, r := range l.since(name, from) {
			fmt.Fprintf(&b, " %d@%.1fs", r.replicas, r.at.Sub(from).Seconds())
		}
		b.WriteByte('\n')
	}
	return b.String()
}
