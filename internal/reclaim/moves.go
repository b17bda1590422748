package reclaim

import (
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// movesKept is how long the engine remembers where its claims went: far
// longer than any two looks at a group's readers are apart.
const movesKept = time.Hour

// moves remembers, per group, the consumers pelwarden's own claims went to
// and when: a watch of a group's readers tells pelwarden's moves from the
// ones its workers make. A group holds at most one time per consumer, and
// nothing older than movesKept is kept.
type moves struct {
	mu sync.Mutex
	to map[liveness.GroupRef]map[string]time.Time
}

func (m *moves) note(g liveness.GroupRef, to string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.to == nil {
		m.to = make(map[liveness.GroupRef]map[string]time.Time)
	}
	// What is older than movesKept goes, in every group: an operator's
	// claims may name groups no hygiene target forgets.
	for group, byName := range m.to {
		for name, t := range byName {
			if at.Sub(t) > movesKept {
				delete(byName, name)
			}
		}
		if len(byName) == 0 {
			delete(m.to, group)
		}
	}
	byName := m.to[g]
	if byName == nil {
		byName = make(map[string]time.Time)
		m.to[g] = byName
	}
	byName[to] = at
}

// ClaimedTo names the consumers pelwarden's claims (hygiene's or an
// operator's) gave entries of g to at or after since.
func (e *Engine) ClaimedTo(g liveness.GroupRef, since time.Time) map[string]bool {
	e.moves.mu.Lock()
	defer e.moves.mu.Unlock()
	out := map[string]bool{}
	for name, t := range e.moves.to[g] {
		if !t.Before(since) {
			out[name] = true
		}
	}
	return out
}

func (m *moves) forget(g liveness.GroupRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.to, g)
}
