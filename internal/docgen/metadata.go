package docgen

import (
	"bytes"
	"strings"

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
		"configuration) asks of a trigger that sets it. KEDA forwards every key of a trigger: the keys of KEDA's Redis " +
		"Streams scalers are treated as [KEDA's keys](keda-keys.md) says, and any other (`scalerAddress` among " +
		"them) is ignored. A malformed metric or liveness value is answered with `InvalidArgument` naming the key and " +
		"what it accepts.\n")
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

// KEDAKeys is docs/reference/keda-keys.md: metadata.KEDAKeys, the
// contract with KEDA's Redis Streams scalers that the parser walks.
func KEDAKeys() (Page, error) {
	return page("docs/reference/keda-keys.md", "internal/metadata (KEDAKeys)", writeKEDAKeys)
}

func writeKEDAKeys(b *bytes.Buffer) error {
	b.WriteString("# KEDA's keys\n\n")
	b.WriteString("Every trigger metadata key that KEDA v2.21's `redis-streams`, `redis-cluster-streams` and " +
		"`redis-sentinel-streams` scalers read, and what pelwarden does with it once the trigger moves to `type: external` " +
		"(KEDA forwards every key, and each `FromEnv` key with the value it resolved from the workload's environment). " +
		"A trigger gets KEDA's number, less the entries ghosts hold, or an `InvalidArgument` refusal naming the key; " +
		"never a number read from another database, server or rule. KEDA reads `tls`, `ca`, `cert`, `key` and `keyPassword` " +
		"from a TriggerAuthentication only, which it never forwards: the connection's `tls` block holds them.\n\n")
	header(b, "key", "KEDA's scaler", "pelwarden", "treatment")
	for _, k := range metadata.KEDAKeys {
		names := make([]string, 0, 2)
		for _, n := range k.Names() {
			names = append(names, code(n))
		}
		row(b, strings.Join(names, ", "), k.KEDA, k.Pelwarden, k.Treatment.String())
	}
	b.WriteString("\nA connection key that disagrees is refused with what the connection has and the fix: the connection " +
		"(`redis: <name>`) that agrees with every connection key of the trigger and that its namespace may reach, or, " +
		"where none does, to add one. A value resolved from the environment is never quoted.\n")
	return nil
}
