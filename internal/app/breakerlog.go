package app

import (
	"log/slog"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// logBreaker says when a target's disruption breaker trips or lets go:
// the snapshot that did it is the one stamped with its moment.
func logBreaker(log *slog.Logger, t liveness.Target, s *liveness.Snapshot) {
	switch b := s.BreakerState(); {
	case !b.Tripped():
	case b.TrippedAt.Equal(s.At):
		log.Warn("disruption breaker tripped: consumers that turned Ghost together are held Unknown", "target", t.String(),
			"turned", b.Turned, "of", b.Of, "evidence", string(b.Source), "held", b.Held)
	case b.ReleasedAt.Equal(s.At):
		log.Info("disruption breaker lets go: evidence written after the trip came", "target", t.String(), "held", b.Held)
	}
}
