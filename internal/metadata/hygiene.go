package metadata

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pelwarden/pelwarden/internal/policy"
)

// ParseTrigger reads the metadata of a KEDA trigger. Only the metric keys
// can make it fail: the metric is what keeps a ScaledObject scaling. The
// hygiene keys are read only when the trigger asks for reclaim, and a bad
// one, or one that only the configuration may set (ConfigOnlyKeys), turns
// hygiene off and is reported in HygieneErr instead.
func ParseTrigger(md map[string]string, env Env) (Request, error) {
	return parseTrigger(fields{md: md}, env)
}

func parseTrigger(f fields, env Env) (Request, error) {
	r, err := parseMetric(f, env)
	if err != nil {
		return r, err
	}
	r.Hygiene = policy.Hygiene{Mode: policy.ReclaimOff}
	if v := f.get(KeyReclaim); v == "" || v == string(policy.ReclaimOff) {
		return r, nil
	}
	h, err := parseHygiene(f, r.Target.Stream)
	if err == nil {
		err = CheckTriggerHygiene(h, r.Target.Stream)
	}
	if err != nil {
		r.HygieneErr = asError(err)
		return r, nil
	}
	r.Hygiene = h
	return r, nil
}

// ConfigOnlyKeys are the hygiene keys that destroy or move data, or take
// entries from a consumer that may be alive: a trigger may leave them out
// or give their default, and only hygiene.targets may set them.
var ConfigOnlyKeys = configOnlyKeys()

func configOnlyKeys() []string {
	var names []string
	for _, k := range Keys {
		if k.ConfigOnly {
			names = append(names, k.Name)
		}
	}
	return names
}

// configOnlyRule is what a trigger is told when it sets a config-only key.
const configOnlyRule = "set it in hygiene.targets of pelwarden's configuration; trigger metadata may not"

// CheckTriggerHygiene refuses hygiene settings that only the configuration
// may ask for: claim, a hard timeout, deleting originals, another carry
// field, a dead-letter stream other than <stream>:dead, a claim fallback.
func CheckTriggerHygiene(h policy.Hygiene, stream string) error {
	switch {
	case h.Mode == policy.ReclaimClaim:
		return &Error{Key: KeyReclaim, Accepted: "may be requeue or off in a trigger; claim takes entries to live consumers: " + configOnlyRule, Got: string(h.Mode)}
	case h.Mode == policy.ReclaimRelease:
		return &Error{Key: KeyReclaim, Accepted: "may be requeue or off in a trigger; release leaves entries to the group's claiming readers: " + configOnlyRule, Got: string(h.Mode)}
	case h.HardTimeout != 0:
		return &Error{Key: KeyHardTimeoutSeconds, Accepted: "reclaims from live workers: " + configOnlyRule, Got: h.HardTimeout.String()}
	case h.DeleteOriginal:
		return &Error{Key: KeyDeleteOriginal, Accepted: "deletes entries: " + configOnlyRule, Got: "true"}
	case h.DeliveryCountField != DefaultDeliveryCountField:
		return &Error{Key: KeyDeliveryCountField, Accepted: "writes a field into the job (default " + DefaultDeliveryCountField + "): " + configOnlyRule, Got: h.DeliveryCountField}
	case h.DeadLetterStream != "" && h.DeadLetterStream != stream+":dead":
		return &Error{Key: KeyDeadLetterStream, Accepted: "moves entries to another stream (a trigger gets " + stream + ":dead): " + configOnlyRule, Got: h.DeadLetterStream}
	case h.ClaimFallback != policy.FallbackRequeue:
		return &Error{Key: "claimFallback", Accepted: "applies to claim only: " + configOnlyRule, Got: string(h.ClaimFallback)}
	case h.ClaimingReaders:
		return &Error{Key: KeyClaimingReaders, Accepted: "applies to release only: " + configOnlyRule, Got: "true"}
	}
	return nil
}

// asError is err as an *Error; the parsers return no other kind.
func asError(err error) *Error {
	var me *Error
	if errors.As(err, &me) {
		return me
	}
	return &Error{Key: KeyReclaim, Accepted: err.Error()}
}

// Defaults of the hygiene keys.
const (
	// DefaultEntryStaleSeconds: an entry a ghost held for 30 s is not one a
	// worker is about to acknowledge.
	DefaultEntryStaleSeconds = 30
	// DefaultDeliveryCountField carries delivery counts across requeues.
	DefaultDeliveryCountField = "pelwarden-deliveries"
)

// DefaultHygiene is the settings of a trigger that asks for reclaim
// requeue and sets no other hygiene key: what the Admin API plans and acts
// with on a group the hygiene loop does not look after.
func DefaultHygiene(stream string) policy.Hygiene {
	h, _ := parseHygiene(fields{md: map[string]string{KeyReclaim: string(policy.ReclaimRequeue)}}, stream)
	return h
}

func parseHygiene(f fields, stream string) (policy.Hygiene, error) {
	h := policy.Hygiene{Mode: policy.ReclaimOff, DeliveryCountField: DefaultDeliveryCountField, ClaimFallback: policy.FallbackRequeue}
	switch v := f.get(KeyReclaim); v {
	case "", "off":
	case "requeue", "claim", "release":
		h.Mode = policy.ReclaimMode(v)
	default:
		return h, &Error{Key: KeyReclaim, Accepted: "must be requeue, claim, release or off", Got: v}
	}
	var err error
	if h.EntryStale, err = seconds(f, KeyEntryStaleSeconds, DefaultEntryStaleSeconds); err != nil {
		return h, err
	}
	if v, ok := f.lookup(KeyHardTimeoutSeconds); ok && v != "0" {
		if h.HardTimeout, err = seconds(f, KeyHardTimeoutSeconds, 0); err != nil {
			return h, err
		}
	}
	maxDel, err := number(f, KeyMaxDeliveries, 0, false)
	if err != nil || maxDel != float64(int64(maxDel)) {
		return h, &Error{Key: KeyMaxDeliveries, Accepted: "must be a whole number >= 0 (0 is off)", Got: f.md[KeyMaxDeliveries]}
	}
	h.MaxDeliveries = int64(maxDel)
	h.DeadLetterStream = f.get(KeyDeadLetterStream)
	switch {
	case h.DeadLetterStream == "" && h.MaxDeliveries > 0:
		h.DeadLetterStream = stream + ":dead"
	case h.DeadLetterStream == stream:
		return h, &Error{Key: KeyDeadLetterStream, Accepted: "must differ from stream", Got: h.DeadLetterStream}
	case len(h.DeadLetterStream) > MaxNameLen:
		return h, &Error{Key: KeyDeadLetterStream, Accepted: fmt.Sprintf("must be at most %d bytes", MaxNameLen)}
	}
	if v, ok := f.lookup(KeyDeliveryCountField); ok {
		switch {
		case v == "off":
			h.DeliveryCountField = ""
		case v == "" || len(v) > 256:
			return h, &Error{Key: KeyDeliveryCountField, Accepted: "must be a field name of 1 to 256 bytes, or off", Got: v}
		case policy.ReservedField(v):
			return h, &Error{Key: KeyDeliveryCountField, Accepted: "must not be a field pelwarden writes itself (" + strings.Join(policy.ReservedFields, ", ") + ")", Got: v}
		default:
			h.DeliveryCountField = v
		}
	}
	switch v := f.get(KeyClaimFallback); v {
	case "":
	case "requeue", "skip":
		h.ClaimFallback = policy.NoCandidate(v)
	default:
		return h, &Error{Key: KeyClaimFallback, Accepted: "must be requeue or skip", Got: v}
	}
	for key, dst := range map[string]*bool{KeyDeleteGhostConsumers: &h.DeleteGhostConsumers, KeyDeleteOriginal: &h.DeleteOriginal, KeyDryRun: &h.DryRun,
		KeyClaimingReaders: &h.ClaimingReaders} {
		if *dst, err = boolean(f, key, key == KeyDeleteGhostConsumers); err != nil {
			return h, err
		}
	}
	if h.Mode == policy.ReclaimRelease && !h.ClaimingReaders {
		return h, &Error{Key: KeyReclaim, Accepted: "may be release only with claimingReaders: true: a released entry is read again only by a " +
			"reader that claims (XREADGROUP ... CLAIM, XAUTOCLAIM), never by `>`; where the workers read with `>` alone, use requeue", Got: "release"}
	}
	return h, nil
}

func boolean(f fields, key string, def bool) (bool, error) {
	raw, ok := f.lookup(key)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseBool(strings.TrimSpace(raw))
	if err != nil {
		return false, &Error{Key: key, Accepted: "must be true or false", Got: raw}
	}
	return v, nil
}
