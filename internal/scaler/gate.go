package scaler

import "context"

// streamKey names a Redis stream of a connection: what one armed watch,
// and so one entry's wake, is shared by.
type streamKey struct{ conn, stream string }

// gate lets the targets that one entry on a stream woke together judge
// it one at a time. A thousand targets of one group that differ only in
// a threshold share that entry's one read, but each is judged from it by
// its own settings: in turn, they take one CPU while a poll of any other
// target is answered on the others; all at once, they would fill every
// CPU's run queue ahead of it. The first to pass reads for the rest, who
// wait parked, so that a target of another group on the same stream reads
// after it.
type gate struct {
	ch chan struct{}
	// targets counts the activeTargets of the stream; guarded by
	// activeTargets.mu.
	targets int
}

// enter waits for the gate, or for ctx to end (false).
func (g *gate) enter(ctx context.Context) bool {
	select {
	case g.ch <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *gate) leave() { <-g.ch }

// gateLocked returns the gate of t's stream, counting t in it; a.mu is
// held.
func (a *activeTargets) gateLocked(k streamKey) *gate {
	g := a.gates[k]
	if g == nil {
		g = &gate{ch: make(chan struct{}, 1)}
		a.gates[k] = g
	}
	g.targets++
	return g
}

// ungate lets t's gate go once t's goroutine ends; the stream's last
// target drops it.
func (a *activeTargets) ungate(t *activeTarget) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := streamKey{t.r.Target.Conn, t.r.Target.Stream}
	if t.gate.targets--; t.gate.targets <= 0 && a.gates[k] == t.gate {
		delete(a.gates, k)
	}
}
