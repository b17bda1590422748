package liveness

import (
	"slices"
	"strings"
)

// consumerRow is one consumer of an observation: its XINFO CONSUMERS row
// if listed there, and its pending entries.
type consumerRow struct {
	obs     ConsumerObs
	listed  bool
	pending int64
}

// consumerRows lists every consumer of the observation in name order:
// those XINFO CONSUMERS lists and those only in the pending summary. It
// depends on the observation alone.
func consumerRows(obs Observation) []consumerRow {
	rows := make([]consumerRow, 0, len(obs.Consumers)+len(obs.PendingByConsumer))
	for _, c := range obs.Consumers {
		rows = append(rows, consumerRow{obs: c, listed: true})
	}
	slices.SortFunc(rows, func(a, b consumerRow) int { return strings.Compare(a.obs.Name, b.obs.Name) })
	for name := range obs.PendingByConsumer {
		if _, found := slices.BinarySearchFunc(rows[:len(obs.Consumers)], name, func(r consumerRow, n string) int {
			return strings.Compare(r.obs.Name, n)
		}); !found {
			rows = append(rows, consumerRow{obs: ConsumerObs{Name: name}})
		}
	}
	slices.SortFunc(rows, func(a, b consumerRow) int { return strings.Compare(a.obs.Name, b.obs.Name) })
	for i := range rows {
		rows[i].pending = obs.PendingByConsumer[rows[i].obs.Name]
	}
	return rows
}
