package docgen

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/hpaloop"
)

// HPALoopResults is where make test-hpa HPA_RESULTS=... writes the run
// docs/reference/performance.md shows.
const HPALoopResults = "bench/hpa-loop.json"

// HPALoop is the part of docs/reference/performance.md that shows the HPA
// suite's last recorded run: each scenario with both Deployments'
// replicas over time and the replica-seconds they were given.
func HPALoop(root string) ([]byte, error) {
	run, err := hpaloop.Read(filepath.Join(root, HPALoopResults))
	if err != nil {
		return nil, err
	}
	if len(run.Scenarios) == 0 || len(run.Scenarios[0].Sides) != 2 {
		return nil, errors.New(HPALoopResults + ": a run has scenarios, each with two sides")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nThis run: %s, Kubernetes %s, KEDA %s, %s, %d CPUs; the suite took %s. "+
		"HPA sync every %g s, `pollingInterval: %d`, `pendingEntriesCount: \"%d\"` on both triggers, "+
		"%d to %d replicas, a fallback of %d. Each timeline is replicas (seconds since the scenario began).\n\n",
		run.Date, run.Kubernetes, run.KEDA, run.Redis, run.CPUs, (time.Duration(run.WallSeconds) * time.Second).String(),
		run.HPASyncSeconds, run.PollingIntervalSeconds, run.Target, run.MinReplicas, run.MaxReplicas, run.FallbackReplicas)
	sides := run.Scenarios[0].Sides
	header(&b, "scenario", "what happens", "seconds", sides[0].Trigger, "replica-s", sides[1].Trigger, "replica-s")
	for _, sc := range run.Scenarios {
		if len(sc.Sides) != 2 {
			return nil, fmt.Errorf("%s: scenario %q has %d sides, want 2", HPALoopResults, sc.Name, len(sc.Sides))
		}
		row(&b, sc.Name, sc.What, fmt.Sprintf("%.1f", sc.Seconds),
			timeline(sc.Sides[0].Changes), fmt.Sprintf("%.0f", sc.Sides[0].ReplicaSeconds),
			timeline(sc.Sides[1].Changes), fmt.Sprintf("%.0f", sc.Sides[1].ReplicaSeconds))
	}
	ghosts := run.Scenarios[0]
	pw, keda := ghosts.Sides[0].ReplicaSeconds, ghosts.Sides[1].ReplicaSeconds
	if keda > 0 {
		fmt.Fprintf(&b, "\nOver the %s scenario's %.0f s the HPA asked for %.0f replica-seconds on %s and %.0f on %s: %.2fx.\n",
			ghosts.Name, ghosts.Seconds, pw, sides[0].Trigger, keda, sides[1].Trigger, pw/keda)
	}
	return b.Bytes(), nil
}

// timeline writes changes as 1 (0.0) → 3 (1.2).
func timeline(changes []hpaloop.Change) string {
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = fmt.Sprintf("%d (%.1f)", c.Replicas, c.At)
	}
	return strings.Join(parts, " → ")
}
