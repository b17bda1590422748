package metadata

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pelwarden/pelwarden/internal/policy"
)

// The metadata keys pelwarden reads, beside the metric keys that
// policy.Metric names (Key, ActivationKey) and ProfileKey. The parsers
// read every key through these names, and Keys documents each under the
// same name, so a key renamed here is renamed in the reference too.
const (
	KeyRedis                      = "redis"
	KeyStream                     = "stream"
	KeyConsumerGroup              = "consumerGroup"
	KeyStreamLength               = "streamLength"
	KeyLiveness                   = "liveness"
	KeyGhostIdleSeconds           = "ghostIdleSeconds"
	KeyHeartbeatKey               = "heartbeatKey"
	KeyHeartbeatMaxAgeSeconds     = "heartbeatMaxAgeSeconds"
	KeyHeartbeatStartGraceSeconds = "heartbeatStartGraceSeconds"
	KeyOwnerMatch                 = "ownerMatch"
	KeyPodSelector                = "podSelector"
	KeyPodNamespace               = "podNamespace"
	KeyPodDeletionGraceSeconds    = "podDeletionGraceSeconds"
	KeyReclaim                    = "reclaim"
	KeyEntryStaleSeconds          = "entryStaleSeconds"
	KeyHardTimeoutSeconds         = "hardTimeoutSeconds"
	KeyMaxDeliveries              = "maxDeliveries"
	KeyDeadLetterStream           = "deadLetterStream"
	KeyDeliveryCountField         = "deliveryCountField"
	KeyDeleteGhostConsumers       = "deleteGhostConsumers"
	KeyDeleteOriginal             = "deleteOriginal"
	KeyClaimFallback              = "claimFallback"
	KeyClaimingReaders            = "claimingReaders"
	KeyDryRun                     = "dryRun"
)

// KeyKind is what a key decides.
type KeyKind int

// The kinds of keys, in reference order.
const (
	// KindMetric keys choose the target and the metric KEDA gets.
	KindMetric KeyKind = iota
	// KindProfile is livenessProfile, which names the operator's liveness
	// settings instead of the trigger's own.
	KindProfile
	// KindEvidence keys say which evidence can mark a consumer dead; a
	// livenessProfile sets them, and a trigger that names one may not.
	KindEvidence
	// KindThreshold keys say how long the evidence must hold; a trigger
	// that names a livenessProfile may lengthen them only.
	KindThreshold
	// KindHygiene keys say what the hygiene loop does for the group.
	KindHygiene
)

// Key documents one metadata key. The texts are Markdown, for the
// reference page generated from Keys.
type Key struct {
	Name string
	Kind KeyKind
	// Accepted is the values the parser accepts.
	Accepted string
	// Default is what a trigger that leaves the key out gets.
	Default string
	// Doc says what the key does.
	Doc string
	// Trigger says what the trigger policy (triggers in pelwarden's
	// configuration) asks of a trigger that sets the key.
	Trigger string
	// ConfigOnly keys destroy or move data, or take entries from a
	// consumer that may be alive: a trigger may leave them out or give
	// their default, and only hygiene.targets may set them.
	ConfigOnly bool
}

// Keys lists every key the parsers read, in reference order.
var Keys = slices.Concat(metricKeys, livenessKeys, hygieneKeys)

var metricKeys = []Key{
	{Name: KeyRedis, Accepted: "a connection name of `redis[].name`", Default: code(DefaultConnection),
		Doc:     "The Redis connection to read; a trigger can reach no address that is not configured.",
		Trigger: "a `triggers.rules` entry naming the namespace and a `redis` glob matching the connection"},
	{Name: KeyStream, Accepted: "a stream name of 1-" + strconv.Itoa(MaxNameLen) + " bytes", Default: "required",
		Doc: "The stream of the target.", Trigger: "any"},
	{Name: KeyConsumerGroup, Accepted: "a group name of 1-" + strconv.Itoa(MaxNameLen) + " bytes", Default: "required",
		Doc: "The consumer group of the target.", Trigger: "any"},
	{Name: policy.Pending.Key(), Accepted: minTarget, Default: num(DefaultPendingEntriesCount) + " (as KEDA)",
		Doc:     "Target live-pending entries per replica: the default metric. Live means held by a consumer that is neither `Ghost` nor `Degraded`.",
		Trigger: "any"},
	{Name: policy.Lag.Key(), Accepted: minTarget, Default: "none",
		Doc:     "Target lag per replica (`XINFO GROUPS` lag, or its estimate when Redis answers NULL); wins over `pendingEntriesCount`, as in KEDA.",
		Trigger: "any"},
	{Name: policy.Backlog.Key(), Accepted: minTarget, Default: "none",
		Doc:     "Target lag plus live pending per replica; not beside `pendingEntriesCount` or `lagCount` (the error names both keys).",
		Trigger: "any"},
	{Name: KeyStreamLength, Accepted: "a number >= 0", Default: "none",
		Doc:     "Ignored beside `consumerGroup`, as in KEDA; without one (KEDA's `XLEN` metric) the trigger is refused, naming `consumerGroup`.",
		Trigger: "any"},
	{Name: policy.Lag.ActivationKey(), Accepted: "a number >= 0", Default: "`0`",
		Doc:     "Active when the metric is above this: lag or, as in KEDA's redis-streams scalers, live pending.",
		Trigger: "any"},
	{Name: policy.Pending.ActivationKey(), Accepted: "a number >= 0", Default: "`0`",
		Doc:     "Active when live pending is above this; only with `pendingEntriesCount`, and not beside `activationLagCount`.",
		Trigger: "any"},
	{Name: policy.Backlog.ActivationKey(), Accepted: "a number >= 0", Default: "`0`",
		Doc: "Active when the backlog is above this; only with `backlogCount`.", Trigger: "any"},
}

var livenessKeys = []Key{
	{Name: ProfileKey, Kind: KindProfile, Accepted: "a profile name of `triggers.profiles`", Default: "none",
		Doc: "The operator's liveness profile that judges the metric and the group's hygiene. With it the evidence keys are refused " +
			"(set by the profile) and the thresholds may only be equal to or longer than the profile's.",
		Trigger: "a rule's `profiles` glob matching the name (else every RPC is `PermissionDenied`); required to ask for `reclaim`"},
	{Name: KeyLiveness, Kind: KindEvidence, Accepted: "a comma list of `idle`, `heartbeat`, `kubernetes`", Default: "`idle`",
		Doc:     "The sources of evidence of life; `kubernetes` needs `kubernetes.enabled`.",
		Trigger: "any, without `livenessProfile`"},
	{Name: KeyGhostIdleSeconds, Kind: KindThreshold, Accepted: seconds1ms, Default: num(DefaultGhostIdleSeconds),
		Doc: "`idle`: a consumer with no read attempt for this long is a ghost. Workers call XREADGROUP at least every BLOCK timeout, " +
			"so only a dead or stuck process stays quiet this long; long jobs need heartbeats.",
		Trigger: "any; with `reclaim`, at least `triggers.floors.ghostIdle`"},
	{Name: KeyHeartbeatKey, Kind: KindEvidence, Accepted: "a key pattern of at most 1024 bytes with exactly one placeholder, `{consumer}` or `{owner}`", Default: "none",
		Doc: "`heartbeat`: where a consumer's heartbeat is; the value is a Unix time in s or ms, or a JSON object with a time and an " +
			"optional `degraded` flag. A missing key is no heartbeat. Required with `heartbeat`.",
		Trigger: "a rule's `heartbeatKeys` glob matching the pattern (else every RPC is `PermissionDenied`), for the trigger's metric only"},
	{Name: KeyHeartbeatMaxAgeSeconds, Kind: KindThreshold, Accepted: seconds1ms, Default: num(DefaultHeartbeatMaxAgeSeconds),
		Doc:     "`heartbeat`: an older heartbeat is stale (three missed beats of a 10 s heartbeat).",
		Trigger: "any; with `reclaim`, at least `triggers.floors.heartbeatMaxAge`"},
	{Name: KeyHeartbeatStartGraceSeconds, Kind: KindThreshold, Accepted: "`0` or " + seconds1ms, Default: code(KeyHeartbeatMaxAgeSeconds),
		Doc: "`heartbeat`: a consumer new to pelwarden that reads without a heartbeat yet is a starting worker for this long; " +
			"after it a missing heartbeat is a ghost. `0`: workers beat before they read.",
		Trigger: "any; with `reclaim`, at least `triggers.floors.heartbeatMaxAge`"},
	{Name: KeyOwnerMatch, Kind: KindEvidence, Accepted: "`exact`, `prefix` or `regex:<pattern with (?P<owner>...)>`", Default: "`exact`",
		Doc: "How a consumer name maps to its owner: `prefix` takes the longest owner (`review-e-codex-0` belongs to `review-e-codex`, " +
			"not `review-e`). With `kubernetes` an owner is a pod name.",
		Trigger: "any, without `livenessProfile`"},
	{Name: KeyPodSelector, Kind: KindEvidence, Accepted: "a Kubernetes label selector such as `app=worker`", Default: "required with `kubernetes`",
		Doc: "`kubernetes`: the label selector of the worker pods.", Trigger: "any, without `livenessProfile`"},
	{Name: KeyPodNamespace, Kind: KindEvidence, Accepted: "a namespace name", Default: "the ScaledObject's namespace",
		Doc:     "`kubernetes`: the namespace of the worker pods (required in `hygiene.targets` and profiles).",
		Trigger: "any, without `livenessProfile`"},
	{Name: KeyPodDeletionGraceSeconds, Kind: KindThreshold, Accepted: "`0` or " + seconds1ms, Default: num(DefaultPodDeletionGraceSeconds),
		Doc: "`kubernetes`: how long after its pod went a consumer is still given; long enough for a StatefulSet to bring back a pod " +
			"of the same name. A pod a ReplicaSet controls (a Deployment's) gets none: its name never returns.",
		Trigger: "any; with `reclaim`, at least `triggers.floors.podDeletionGrace`"},
}

var hygieneKeys = []Key{
	{Name: KeyReclaim, Kind: KindHygiene, Accepted: "`requeue`, `claim`, `release` or `off`", Default: "`off`",
		Doc: "`requeue`: XADD a copy and XACK the original. `claim`: XCLAIM to an Alive consumer, one scan spreading its claims, " +
			"the freshest heartbeat first. `release`: XNACK the entry (Redis 8.8): it keeps its id, with no owner, for the " +
			"next reader that claims; needs `claimingReaders: true`, and a server without XNACK is refused. `off`: leave the group alone.",
		Trigger:    "`requeue` only, with `triggers.reclaim: requeue`, a `livenessProfile` and a rule's `hygieneStreams` glob matching the stream; `claim` and `release` are config only",
		ConfigOnly: true},
	{Name: KeyEntryStaleSeconds, Kind: KindHygiene, Accepted: seconds1ms, Default: num(DefaultEntryStaleSeconds),
		Doc: "An entry must be idle this long before any action.", Trigger: "at least `triggers.floors.entryStale`"},
	{Name: KeyHardTimeoutSeconds, Kind: KindHygiene, Accepted: "`0` or " + seconds1ms, Default: "`0` (off)",
		Doc:     "Reclaim an entry idle this long even from a live owner (never from an Unknown one).",
		Trigger: "config only", ConfigOnly: true},
	{Name: KeyMaxDeliveries, Kind: KindHygiene, Accepted: "a whole number >= 0", Default: "`0` (off)",
		Doc:     "Dead-letter an entry delivered this many times, requeues included.",
		Trigger: "`0` or at least `triggers.floors.maxDeliveries`"},
	{Name: KeyDeadLetterStream, Kind: KindHygiene, Accepted: "a stream name other than `stream`, at most 1024 bytes", Default: "`<stream>:dead`",
		Doc: "Where dead-lettered entries go, with `pelwarden-origin-id`, `-origin-stream`, `-group`, `-consumer`, `-deliveries` " +
			"and `-reason` fields.",
		Trigger: "config only, unless `<stream>:dead`", ConfigOnly: true},
	{Name: KeyDeliveryCountField, Kind: KindHygiene, Accepted: "a field name of 1-256 bytes that pelwarden does not write itself, or `off`",
		Default: code(DefaultDeliveryCountField),
		Doc:     "The field a requeued copy carries its delivery count in, so poison entries still reach the dead-letter stream.",
		Trigger: "config only", ConfigOnly: true},
	{Name: KeyDeleteGhostConsumers, Kind: KindHygiene, Accepted: "`true` or `false`", Default: "`true`",
		Doc: "Delete a ghost consumer once its PEL is empty.", Trigger: "any, with `reclaim`"},
	{Name: KeyDeleteOriginal, Kind: KindHygiene, Accepted: "`true` or `false`", Default: "`false`",
		Doc: "XDEL the original after a requeue or dead-letter.", Trigger: "config only", ConfigOnly: true},
	{Name: KeyClaimFallback, Kind: KindHygiene, Accepted: "`requeue` or `skip`", Default: "`requeue`",
		Doc: "What claim mode does when no consumer is alive.", Trigger: "config only", ConfigOnly: true},
	{Name: KeyClaimingReaders, Kind: KindHygiene, Accepted: "`true` or `false`", Default: "`false`",
		Doc: "The workers claim idle and released entries as they read: `XREADGROUP ... CLAIM` (Redis 8.4) or an XAUTOCLAIM loop. " +
			"`reclaim: release` needs it, since `>` never re-delivers a released entry.",
		Trigger: "config only", ConfigOnly: true},
	{Name: KeyDryRun, Kind: KindHygiene, Accepted: "`true` or `false`", Default: "`false`",
		Doc: "Decide and report (logs, `pelwarden_hygiene_dry_run_total`), change nothing.", Trigger: "any, with `reclaim`"},
}

// Texts the table shares, written from the parsers' own bounds.
var (
	seconds1ms = fmt.Sprintf("seconds, %g to %d", MinDuration.Seconds(), maxSeconds)
	minTarget  = fmt.Sprintf("a number >= %d", MinTarget)
)

func num(v int) string     { return code(strconv.Itoa(v)) }
func code(s string) string { return "`" + s + "`" }

// keyNames lists the names of the keys of kind k, in table order.
func keyNames(k KeyKind) []string {
	var names []string
	for _, key := range Keys {
		if key.Kind == k {
			names = append(names, key.Name)
		}
	}
	return names
}

// fields is trigger metadata as the parsers read it. Every read of a key
// goes through lookup, so a test can record the keys a parse reads and
// hold them to Keys.
type fields struct {
	md map[string]string
	// read, when set, is told each key read.
	read func(key string)
}

func (f fields) lookup(key string) (string, bool) {
	if f.read != nil {
		f.read(key)
	}
	v, ok := f.md[key]
	return v, ok
}

func (f fields) get(key string) string {
	v, _ := f.lookup(key)
	return v
}

func (f fields) has(key string) bool {
	_, ok := f.lookup(key)
	return ok
}
