package app

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// admit is the scaler's admission of every request: the trigger policy,
// then, for the kubernetes source, the trigger's pod watch.
//
// A pod watch past kubernetes.maxPodWatches (or the namespace's share)
// refuses the whole request with ResourceExhausted rather than serving
// the metric with the pods Unknown: Unknown counts every ghost's entries
// as live, so the metric would be quietly inflated, with nothing telling
// the ScaledObject's owner why, while an error names the setting on the
// ScaledObject and in KEDA's log, and KEDA keeps its fallback. A read
// that needs a pod watch outside an RPC and finds no room answers
// Unknown, which is never Ghost.
func (a *App) admit(id trigger.ID, r *metadata.Request) error {
	if err := a.triggers.Admit(id, r); err != nil {
		return err
	}
	if a.pods == nil || !r.Target.Spec.Kubernetes {
		return nil
	}
	err := a.pods.Admit(r.Target.Spec.PodSet(), id.Namespace)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kube.ErrTooManySets):
		return status.Error(codes.ResourceExhausted, err.Error())
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// pinConfigPodSets starts the pod watches of hygiene.targets outside the
// caps: the operator's groups keep their evidence however many watches
// triggers ask for.
func (a *App) pinConfigPodSets(cfg config.Config) error {
	if a.pods == nil {
		return nil
	}
	env := cfg.Env()
	env.Kubernetes = true
	for _, md := range cfg.Hygiene.Targets {
		r, err := metadata.Parse(md, env)
		if err != nil || !r.Target.Spec.Kubernetes { // Validate has already refused bad ones
			continue
		}
		if err := a.pods.Pin(r.Target.Spec.PodSet()); err != nil {
			return err
		}
	}
	return nil
}
