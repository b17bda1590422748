// Package lograte keeps an error that repeats from flooding the log: the
// first occurrence for a key is logged, then at most one line per interval
// carrying the count of the lines left out in between. Keys are what
// repeats on its own, such as one hygiene target; a key is forgotten when
// what it names goes, so the limiter holds no more keys than live targets.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter decides, per key, which lines to log. It is safe for concurrent
// use; the zero value is not usable, call New.
type Limiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	logged     time.Time
	suppressed int
}

// New returns a Limiter that logs a key at most once per every; now is the
// clock, time.Now when nil.
func New(every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, now: now, keys: make(map[string]*state)}
}

// Allow reports whether a line for key is to be logged now and, if so, how
// many lines for key were left out since the last one logged.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, seen := l.keys[key]
	if !seen {
		l.keys[key] = &state{logged: now}
		return true, 0
	}
	if now.Sub(s.logged) < l.every {
		s.suppressed++
		return false, 0
	}
	suppressed = s.suppressed
	s.logged, s.suppressed = now, 0
	return true, suppressed
}

// Log writes msg at level through log when Allow lets key through, adding
// the count of lines left out as "suppressed" when there were any.
func (l *Limiter) Log(ctx context.Context, log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, suppressed := l.Allow(key)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Log(ctx, level, msg, args...)
}

// Forget drops key: what it named is gone, or has recovered, and its next
// error is news again.
func (l *Limiter) Forget(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}
