package metadata

import (
	"fmt"

	"github.com/pelwarden/pelwarden/internal/policy"
)

// groupName reads consumerGroup. KEDA's redis-streams scalers read the
// stream's length (streamLength) when a trigger has no group; a length has
// no consumers and so no ghosts to leave out, so such a trigger is told to
// stay with KEDA's own scaler rather than get a different metric here.
func groupName(f fields) (string, error) {
	if f.has(KeyStreamLength) && f.get(KeyConsumerGroup) == "" {
		return "", &Error{Key: KeyConsumerGroup, Accepted: "is required: streamLength without consumerGroup is KEDA's stream-length (XLEN) metric, which pelwarden does not serve (a length has no ghost-held entries to leave out); keep KEDA's redis-streams trigger for it, or set consumerGroup"}
	}
	return requiredName(f, KeyConsumerGroup)
}

// parseMetricKey chooses the metric as KEDA's redis-streams,
// redis-cluster-streams and redis-sentinel-streams scalers choose it from
// their keys, so their metadata (KEDA's documentation sets all three keys
// in one trigger) means the same here: with a group lagCount wins over
// pendingEntriesCount, and streamLength is ignored. backlogCount is
// pelwarden's own key: KEDA gives it no precedence, so beside another
// metric key it is an error naming both.
func parseMetricKey(f fields) (policy.Metric, float64, error) {
	pending := f.has(policy.Pending.Key())
	lag := f.has(policy.Lag.Key())
	backlog := f.has(policy.Backlog.Key())
	// The keys KEDA reads but then ignores are still numbers there: a
	// malformed one is refused the same way here.
	if _, err := number(f, KeyStreamLength, 0, false); err != nil {
		return 0, 0, err
	}
	m := policy.Pending
	switch {
	case backlog && (pending || lag):
		other := policy.Pending.Key()
		if lag {
			other = policy.Lag.Key()
		}
		return 0, 0, &Error{Key: policy.Backlog.Key(), Accepted: "set only one of backlogCount and " + other + " (backlogCount is pelwarden's lag + live pending; of KEDA's keys, lagCount wins over pendingEntriesCount)"}
	case backlog:
		m = policy.Backlog
	case lag:
		m = policy.Lag
		if _, err := number(f, policy.Pending.Key(), 0, false); err != nil {
			return 0, 0, err
		}
	case !pending:
		return policy.Pending, DefaultPendingEntriesCount, nil
	}
	v, err := number(f, m.Key(), 0, true)
	if err == nil && v < MinTarget {
		err = &Error{Key: m.Key(), Accepted: fmt.Sprintf("must be a number >= %d (entries per replica)", MinTarget), Got: f.md[m.Key()]}
	}
	return m, v, err
}

// activation reads the activation threshold of metric m. KEDA's
// redis-streams scalers have one activation key, activationLagCount, for
// every metric they serve, so it is also the activation of
// pendingEntriesCount here; pelwarden's own activation keys apply to their
// metric only.
func activation(f fields, m policy.Metric) (float64, error) {
	key := m.ActivationKey()
	own := f.has(key)
	keda := f.has(policy.Lag.ActivationKey())
	for _, other := range []policy.Metric{policy.Pending, policy.Lag, policy.Backlog} {
		k := other.ActivationKey()
		if !f.has(k) || other == m || (m == policy.Pending && other == policy.Lag) {
			continue
		}
		return 0, &Error{Key: k, Accepted: fmt.Sprintf("applies to %s; with %s use %s", other.Key(), m.Key(), key)}
	}
	if m == policy.Pending && keda {
		if own {
			return 0, &Error{Key: key, Accepted: "set only one of activationPendingEntriesCount and activationLagCount (KEDA's activation key for every metric of its redis-streams scalers)"}
		}
		key = policy.Lag.ActivationKey()
	}
	return number(f, key, 0, false)
}
