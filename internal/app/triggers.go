package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// newTriggers builds the trigger registry, the one way into the hygiene
// loop, and hands it the targets of hygiene.targets.
func (a *App) newTriggers(cfg config.Config, reg prometheus.Registerer) error {
	return a.newRegistry(cfg, reg, func(e trigger.Enrollment) error {
		// A full loop (hygiene.maxTargets) refuses the trigger's hygiene
		// as ResourceExhausted; its metric is still served.
		return a.hygiene.Add(hygiene.Target{Target: e.Target, Hygiene: e.Hygiene, ActFrom: e.ActFrom, WarmUp: e.WarmUp}, e.Permanent)
	})
}

// OfflineCheck is the check CheckTrigger runs, built from cfg alone with
// nothing started or connected: what pelwarden check-trigger --config
// answers without a running pelwarden.
func OfflineCheck(cfg config.Config) (admin.CheckFunc, error) {
	a := &App{cfg: cfg, log: slog.New(slog.DiscardHandler), env: cfg.Env()}
	if err := a.newRegistry(cfg, prometheus.NewRegistry(), func(trigger.Enrollment) error { return nil }); err != nil {
		return nil, err
	}
	return a.checkTrigger, nil
}

// newRegistry makes the trigger registry, with hygiene.targets in it.
func (a *App) newRegistry(cfg config.Config, reg prometheus.Registerer, enroll func(trigger.Enrollment) error) error {
	a.triggers = trigger.New(trigger.Options{
		Policy: cfg.Triggers, Shares: cfg.TriggerShares(), Expiry: cfg.Scaler.TargetIdleExpiry, Log: a.log, Enroll: enroll,
	}, reg)
	env := cfg.Env()
	for i, md := range cfg.Hygiene.Targets {
		r, err := metadata.Parse(md, env)
		if err == nil { // Validate has already refused bad ones
			err = a.triggers.AddConfig(i, r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkTrigger parses metadata as the scaler does and asks the registry
// what the trigger would get, registering nothing, with the advice that
// refuses nothing: credential keys to remove, and what its liveness
// cannot judge on its connection's Redis.
func (a *App) checkTrigger(ctx context.Context, namespace string, md map[string]string) admin.CheckAnswer {
	var notes []string
	if keys := metadata.CredentialKeys(md); len(keys) > 0 {
		notes = append(notes, metadata.CredentialAdvice(keys))
	}
	env := a.env
	env.Namespace = namespace
	r, err := metadata.ParseTrigger(md, env)
	if err != nil {
		return admin.CheckAnswer{CheckResult: trigger.CheckResult{Denied: &trigger.Refusal{Code: codes.InvalidArgument, Rule: err.Error()}}, Notes: notes}
	}
	if note := a.idleNote(ctx, r); note != "" {
		notes = append(notes, note)
	}
	return admin.CheckAnswer{CheckResult: a.triggers.Check(namespace, r), Notes: notes}
}

// idleNote says what a trigger judged by idle time alone cannot tell on a
// Redis before 7.2, where idle counts reads that delivered entries only:
// a dead holder from a worker polling an empty stream. Such holders are
// Unknown and counted, so a pending count keeps what ghosts hold, as
// KEDA's does. Lag counts no pending entry, so it has nothing to judge.
func (a *App) idleNote(ctx context.Context, r metadata.Request) string {
	s := r.Target.Spec
	// Without connections (a check from the configuration alone) no
	// server's version can be known.
	if a.conns == nil || !s.Idle || s.Heartbeat || s.Kubernetes || r.Metric == policy.Lag {
		return ""
	}
	fromDeliveries, judgesHolders := a.conns.IdleRule(ctx, r.Target.Conn, r.Target.Stream)
	if !fromDeliveries || judgesHolders {
		return ""
	}
	return fmt.Sprintf("connection %q's Redis counts a consumer's idle time from its last read that delivered entries (before 7.2), "+
		"or its version was not read: liveness idle alone cannot tell a dead consumer holding entries from a live one polling an "+
		"empty stream, so it judges them Unknown and counts their entries, as KEDA's scaler does; to leave out what ghosts hold, "+
		"add heartbeats (liveness heartbeat, or a livenessProfile with them), pods (liveness kubernetes), or upgrade Redis to 7.2", r.Target.Conn)
}
