package metadata

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// keyExamples take every path of the parsers between them: each metric,
// each liveness source, a profile whose thresholds a trigger lengthens,
// and hygiene with every key set.
var keyExamples = []map[string]string{
	base(),
	base(KeyRedis, "orders", "lagCount", "3", "activationLagCount", "1", "pendingEntriesCount", "2"),
	base("pendingEntriesCount", "4", "activationPendingEntriesCount", "1"),
	base("backlogCount", "4", "activationBacklogCount", "1", KeyStreamLength, "9"),
	base(KeyLiveness, "idle,heartbeat,kubernetes", KeyGhostIdleSeconds, "60", KeyHeartbeatKey, "hb:{owner}", KeyOwnerMatch, "prefix",
		KeyHeartbeatMaxAgeSeconds, "20", KeyHeartbeatStartGraceSeconds, "5",
		KeyPodSelector, "app=worker", KeyPodNamespace, "jobs", KeyPodDeletionGraceSeconds, "3"),
	base(ProfileKey, "jobs", KeyGhostIdleSeconds, "600", KeyHeartbeatMaxAgeSeconds, "60", KeyHeartbeatStartGraceSeconds, "60",
		KeyPodDeletionGraceSeconds, "10"),
	base(KeyReclaim, "claim", KeyEntryStaleSeconds, "60", KeyHardTimeoutSeconds, "600", KeyMaxDeliveries, "5",
		KeyDeadLetterStream, "jobs:poison", KeyDeliveryCountField, "tries", KeyDeleteGhostConsumers, "false",
		KeyDeleteOriginal, "true", KeyClaimFallback, "skip", KeyDryRun, "true"),
}

var keyEnv = Env{
	Conns: []string{"default", "orders"}, Namespace: "jobs", Kubernetes: true,
	Profiles: map[string]liveness.Spec{"jobs": {Idle: true, Heartbeat: true, Kubernetes: true, HeartbeatKey: "hb:{consumer}",
		PodSelector: "app=worker", PodNamespace: "jobs", GhostIdle: 1, HeartbeatMaxAge: 1, StartGrace: 1, PodGrace: 1}},
}

// TestTheKeyTableIsTheKeysTheParsersRead records every key Parse and
// ParseTrigger read over examples that take every path, and holds the set
// to Keys both ways: a key read under a name the table lacks, or a table
// row no parser reads, fails.
func TestTheKeyTableIsTheKeysTheParsersRead(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	record := func(k string) { read[k] = true }
	for _, md := range keyExamples {
		_, err := parse(fields{md: md, read: record}, keyEnv)
		require.NoError(t, err, "example %v", md)
		_, err = parseTrigger(fields{md: md, read: record}, keyEnv)
		require.NoError(t, err, "example %v", md)
	}
	table := map[string]bool{}
	for _, k := range Keys {
		require.False(t, table[k.Name], "key %s is in Keys twice", k.Name)
		table[k.Name] = true
		require.NotEmpty(t, k.Accepted, "key %s: Accepted", k.Name)
		require.NotEmpty(t, k.Default, "key %s: Default", k.Name)
		require.NotEmpty(t, k.Doc, "key %s: Doc", k.Name)
		require.NotEmpty(t, k.Trigger, "key %s: Trigger", k.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(read)) {
		require.True(t, table[k], "the parsers read metadata key %q, which Keys does not document", k)
	}
	for _, k := range slices.Sorted(maps.Keys(table)) {
		require.True(t, read[k], "Keys documents %q, which no parser reads", k)
	}
}

func TestThePolicyKeyListsComeFromTheTable(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{KeyLiveness, KeyHeartbeatKey, KeyOwnerMatch, KeyPodSelector, KeyPodNamespace}, EvidenceKeys)
	require.Equal(t, []string{KeyGhostIdleSeconds, KeyHeartbeatMaxAgeSeconds, KeyHeartbeatStartGraceSeconds, KeyPodDeletionGraceSeconds}, ThresholdKeys)
	require.ElementsMatch(t, []string{KeyReclaim, KeyHardTimeoutSeconds, KeyDeleteOriginal, KeyDeliveryCountField, KeyDeadLetterStream, KeyClaimFallback,
		KeyClaimingReaders},
		ConfigOnlyKeys)
}
