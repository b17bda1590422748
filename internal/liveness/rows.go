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
	listed := make([]consumerRow, len(obs.Consumers))
	for i, c := range obs.Consumers {
		listed[i] = consumerRow{obs: c, listed: true}
	}
	slices.SortFunc(listed, func(a, b consumerRow) int { return strings.Compare(a.obs.Name, b.obs.Name) })
	isListed := func(name string) bool {
		_, found := slices.BinarySearchFunc(listed, name, func(r consumerRow, n string) int { return strings.Compare(r.obs.Name, n) })
		return found
	}
	// Most pending consumers are listed too: the rows grow past the
	// listed ones only for those that are not.
	rows := listed
	for name := range obs.PendingByConsumer {
		if !isListed(name) {
			rows = append(rows, consumerRow{obs: ConsumerObs{Name: name}})
		}
	}
	if len(rows) > len(listed) {
		slices.SortFunc(rows, func(a, b consumerRow) int { return strings.Compare(a.obs.Name, b.obs.Name) })
	}
	for i := range rows {
		rows[i].pending = obs.PendingByConsumer[rows[i].obs.Name]
	}
	return rows
}
