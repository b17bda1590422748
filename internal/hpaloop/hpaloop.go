// Package hpaloop is the record of make test-hpa: the replicas KEDA's HPA
// gave two Deployments, one scaled on pelwarden's trigger and one on KEDA's
// built-in redis-streams trigger on the same group, over each scenario,
// and the replica-seconds each asked for. The suite writes it as JSON
// (bench/hpa-loop.json); make generate renders docs/reference/performance.md's
// table from that file.
package hpaloop

import (
	"encoding/json"
	"fmt"
	"os"
)

// Run is one whole run of the suite.
type Run struct {
	// Date is the run's day, UTC, as 2006-01-02.
	Date string `json:"date"`
	// CPUs is the machine's CPU count.
	CPUs int `json:"cpus"`
	// Kubernetes, KEDA and Redis are the versions that ran: the API
	// server's, KEDA's module in its operator binary, redis-server's.
	Kubernetes string `json:"kubernetes"`
	KEDA       string `json:"keda"`
	Redis      string `json:"redis"`
	// HPASyncSeconds is kube-controller-manager's
	// --horizontal-pod-autoscaler-sync-period, PollingIntervalSeconds the
	// ScaledObjects' pollingInterval.
	HPASyncSeconds         float64 `json:"hpaSyncSeconds"`
	PollingIntervalSeconds int     `json:"pollingIntervalSeconds"`
	// Target is both triggers' pendingEntriesCount; MinReplicas,
	// MaxReplicas and FallbackReplicas are both ScaledObjects'.
	Target           int `json:"target"`
	MinReplicas      int `json:"minReplicas"`
	MaxReplicas      int `json:"maxReplicas"`
	FallbackReplicas int `json:"fallbackReplicas"`
	// Scenarios are in the order they ran, on one environment.
	Scenarios []Scenario `json:"scenarios"`
	// WallSeconds is the suite's time, start-up included.
	WallSeconds float64 `json:"wallSeconds"`
}

// Scenario is one step of the suite.
type Scenario struct {
	Name string `json:"name"`
	// What says what the step did to the group.
	What string `json:"what"`
	// Seconds is how long the step ran.
	Seconds float64 `json:"seconds"`
	// Sides are pelwarden's Deployment, then KEDA's built-in one.
	Sides []Side `json:"sides"`
}

// Side is one Deployment over a scenario.
type Side struct {
	Trigger string `json:"trigger"`
	// Changes are spec.replicas from the scenario's start: the count at 0
	// first, then each change.
	Changes []Change `json:"changes"`
	// ReplicaSeconds is ReplicaSeconds(Changes, the scenario's Seconds).
	ReplicaSeconds float64 `json:"replicaSeconds"`
}

// Change is a Deployment's spec.replicas from a moment on.
type Change struct {
	// At is seconds since the scenario began.
	At       float64 `json:"at"`
	Replicas int32   `json:"replicas"`
}

// ReplicaSeconds is what a Deployment asked for from 0 to end: each count
// held from its change to the next, or to end. Changes must be in time
// order; a count before the first change is not known and not counted.
func ReplicaSeconds(changes []Change, end float64) float64 {
	var sum float64
	for i, c := range changes {
		until := end
		if i+1 < len(changes) {
			until = min(changes[i+1].At, end)
		}
		if until > c.At {
			sum += float64(c.Replicas) * (until - c.At)
		}
	}
	return sum
}

// Write writes run as indented JSON to path.
func Write(path string, run Run) error {
	data, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644) //nolint:gosec // G306: a results file committed with the docs
}

// Read reads a run Write wrote.
func Read(path string) (Run, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the results file make generate is pointed at
	if err != nil {
		return Run{}, err
	}
	var run Run
	if err := json.Unmarshal(data, &run); err != nil {
		return Run{}, fmt.Errorf("%s: %w", path, err)
	}
	return run, nil
}
