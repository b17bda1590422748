package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pelwarden/pelwarden/internal/config"
)

// readiness is the latest Redis reachability check, written by
// watchReadiness and read by /readyz under its lock.
type readiness struct {
	mu      sync.Mutex
	checked bool
	err     error
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	r.checked, r.err = true, err
	r.mu.Unlock()
}

func (r *readiness) get() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checked, r.err
}

func (a *App) httpHandler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		checked, err := a.ready.get()
		switch {
		case !checked:
			http.Error(w, "not checked yet", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			_, _ = io.WriteString(w, "ok\n")
		}
	})
	if a.cfg.HTTP.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// watchReadiness pings every Redis connection and mirrors the result into
// /readyz and the gRPC health status of the scaler service.
func (a *App) watchReadiness(ctx context.Context) {
	tick := time.NewTicker(readinessInterval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, a.cfg.Scaler.RequestTimeout)
		err := a.conns.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		was, prev := a.ready.get()
		a.ready.set(err)
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
			if !was || prev == nil {
				a.log.Warn("not ready: redis unreachable", "err", err)
			}
		} else if was && prev != nil {
			a.log.Info("ready: redis reachable again")
		}
		a.hs.SetServingStatus(scalerService, st)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// NewLogger builds the process logger from the log settings.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(c.Level))); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
