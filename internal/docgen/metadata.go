package docgen

import (
	"bytes"

	"github.com/pelwarden/pelwarden/internal/metadata"
)

// metadataSections are the sections of the trigger metadata page, one per
// kind of key.
var metadataSections = []struct {
	kind  metadata.KeyKind
	title string
	intro string
}{
	{metadata.KindMetric, "Metric keys", "The target and the metric KEDA gets. Metadata written for KEDA's `redis-streams`, " +
		"`redis-cluster-streams` and `redis-sentinel-streams` scalers means the same metric here."},
	{metadata.KindProfile, "Liveness profile", "The operator's liveness settings, named instead of the trigger's own."},
	{metadata.KindEvidence, "Liveness evidence keys", "Which evidence can mark a consumer dead. A trigger that names a " +
		"`livenessProfile` may not set them: the profile does."},
	{metadata.KindThreshold, "Liveness threshold keys", "How long the evidence must hold. A trigger that names a " +
		"`livenessProfile` may only lengthen the profile's."},
	{metadata.KindHygiene, "Hygiene keys", "What the hygiene loop does for the group; a trigger without `reclaim` leaves it alone. " +
		"Keys marked *config only* destroy or move data, or take entries from workers that may be alive: a trigger may leave " +
		"them out or give their default, and only `hygiene.targets` may set them. A hygiene request the trigger policy refuses " +
		"never fails the metric."},
}

// TriggerMetadata is docs/reference/trigger-metadata.md: metadata.Keys,
// the key table the parsers read every key through.
func TriggerMetadata() (Page, error) {
	return page("docs/reference/trigger-metadata.md", "internal/metadata (Keys)", writeMetadata)
}

func writeMetadata(b *bytes.Buffer) error {
	b.WriteString("# Trigger metadata reference\n\n")
	b.WriteString("Every key of a KEDA `external` trigger's metadata that pelwarden reads, and of `hygiene.targets` in its " +
		"configuration: what it accepts, its default, what it does, and what the trigger policy (`triggers` in the " +
		"configuration) asks of a trigger that sets it. Keys pelwarden does not know are ignored: KEDA forwards every key " +
		"of a trigger, `scalerAddress` among them. A malformed metric or liveness value is answered with `InvalidArgument` " +
		"naming the key and what it accepts.\n")
	for _, s := range metadataSections {
		b.WriteString("\n## " + s.title + "\n\n" + s.intro + "\n\n")
		header(b, "key", "accepted", "default", "what it does", "from a trigger")
		for _, k := range metadata.Keys {
			if k.Kind != s.kind {
				continue
			}
			trigger := k.Trigger
			if k.ConfigOnly && trigger == "config only" {
				trigger = "*config only*"
			}
			row(b, code(k.Name), k.Accepted, k.Default, k.Doc, trigger)
		}
	}
	return nil
}
