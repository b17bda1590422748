package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/metadata"
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
// what the trigger would get, registering nothing.
func (a *App) checkTrigger(namespace string, md map[string]string) trigger.CheckResult {
	env := a.env
	env.Namespace = namespace
	r, err := metadata.ParseTrigger(md, env)
	if err != nil {
		return trigger.CheckResult{Denied: &trigger.Refusal{Code: codes.InvalidArgument, Rule: err.Error()}}
	}
	return a.triggers.Check(namespace, r)
}
