package docgen

import (
	"bytes"
	"strconv"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// LivenessRules is docs/reference/liveness-rules.md: liveness.Rules, the
// verdict table Judge walks.
func LivenessRules() (Page, error) {
	return page("docs/reference/liveness-rules.md", "internal/liveness (Rules)", func(b *bytes.Buffer) error {
		b.WriteString("# Liveness rules reference\n\n")
		b.WriteString("How each consumer is judged: the first row, in order, that applies to its evidence gives its verdict. " +
			"A consumer is judged by the rows of one section after the first: the pod section when its pod was seen to go, " +
			"else the heartbeat section where heartbeats are configured, else the section without them; each ends with a row " +
			"that always applies. Every verdict carries the reasons of each configured source and the deciding row's own. " +
			"Then the disruption breaker holds `Unknown` the consumers of a group that turned `Ghost` together " +
			"([Liveness](../liveness.md#outages-and-the-disruption-breaker)). `Unknown` counts as live and nothing of it is taken.\n")
		section := liveness.Section("")
		n := 0
		for _, r := range liveness.Rules() {
			if r.Section != section {
				section = r.Section
				b.WriteString("\n## " + string(section) + "\n\n")
				header(b, "#", "rule", "when", "verdict", "why")
			}
			n++
			row(b, strconv.Itoa(n), code(r.Name), r.When, code(r.Verdict.String()), r.Why)
		}
		return nil
	})
}
