package metadata

import (
	"strings"
)

// Treatment is what pelwarden does with a key that KEDA's redis-streams,
// redis-cluster-streams and redis-sentinel-streams scalers read, when the
// trigger moves to type external and KEDA forwards the key.
type Treatment int

// The treatments, in reference order.
const (
	// Honored keys mean here what they mean to KEDA's scaler: the same
	// metric, default, activation and precedence. Where a value would give
	// another number, the trigger is refused, naming the key.
	Honored Treatment = iota
	// Checked keys say how to reach Redis, which pelwarden's named
	// connection decides: a value that disagrees with the connection is
	// refused, naming the key, the connection's value and the fix, so no
	// trigger is served silently from another server, database or TLS
	// setting.
	Checked
	// Credential keys carry a secret KEDA sent in clear text. Their values
	// are never kept, hashed into anything kept, logged or echoed; the
	// metric is served, and check-trigger and a warning ask for their
	// removal, since the connection holds pelwarden's own credentials.
	Credential
)

func (t Treatment) String() string {
	return [...]string{"honored", "checked against the connection", "credential: never kept; remove it"}[t]
}

// KEDAKey is one key of KEDA's Redis Streams scalers (v2.21) and what
// pelwarden does with it. The texts are Markdown, for the contract page
// generated from KEDAKeys.
type KEDAKey struct {
	Name string
	// FromEnv marks a key KEDA also reads as Name+"FromEnv": the name of
	// an environment variable of the workload, whose value KEDA resolves
	// and forwards to an external scaler under the FromEnv key.
	FromEnv bool
	// KEDA is what KEDA's scaler does with the key.
	KEDA      string
	Treatment Treatment
	// Pelwarden is what pelwarden does with it.
	Pelwarden string
	// check holds a Checked key's value, trimmed and not empty, to the
	// connection: it says what the connection has, whether the two agree,
	// and, for a value KEDA could not read, what the key accepts. nil for
	// the other treatments.
	check func(v string, c Connection) (have string, ok bool, malformed string)
}

// envSuffix is the suffix of the keys whose value KEDA resolved from the
// workload's environment.
const envSuffix = "FromEnv"

// KEDAKeys lists every trigger metadata key KEDA v2.21's Redis Streams
// scalers read (the `keda:` tags of redisStreamsMetadata and
// redisConnectionInfo whose order includes triggerMetadata or
// resolvedEnv), in reference order. KEDA reads tls, ca, cert, key and
// keyPassword from a TriggerAuthentication only, which it never forwards
// to an external scaler: the connection's tls block holds them.
var KEDAKeys = []KEDAKey{
	{Name: KeyStream, KEDA: "The stream; required.", Treatment: Honored,
		Pelwarden: "The same. A name with white space around it, which KEDA trims, is refused."},
	{Name: KeyConsumerGroup, KEDA: "The group; without it KEDA reports the stream's length (`XLEN`).", Treatment: Honored,
		Pelwarden: "Required: without it the trigger is refused, naming `consumerGroup` (a length holds no ghost-held entries to leave out). " +
			"A name with white space around it is refused."},
	{Name: "pendingEntriesCount", KEDA: "Target `XPENDING` count per replica; the metric unless `lagCount` is set; default `5`.", Treatment: Honored,
		Pelwarden: "The same, less the entries ghosts hold; default `5`. A decimal of at least 1 is taken too; below 1 is refused."},
	{Name: "lagCount", KEDA: "Target lag per replica (`XINFO GROUPS`); wins over `pendingEntriesCount`; `0` is unset. " +
		"A group not created yet counts the stream's length.", Treatment: Honored,
		Pelwarden: "The same, a group not created yet included; `0` and an empty value are refused, naming the key."},
	{Name: KeyStreamLength, KEDA: "Target `XLEN` per replica, read only without a group.", Treatment: Honored,
		Pelwarden: "Ignored beside a group, as in KEDA, but must be a number >= 0."},
	{Name: "activationLagCount", KEDA: "Active when the metric, whichever it is, is above this; default `0`.", Treatment: Honored,
		Pelwarden: "The same."},
	{Name: "databaseIndex", KEDA: "The database to `SELECT`; ignored by `redis-cluster-streams`.", Treatment: Checked,
		Pelwarden: "Must equal `redis[].db` of the connection (a cluster's is 0).", check: checkDB},
	{Name: "enableTLS", KEDA: "Dial Redis over TLS. Once moved, KEDA's external scaler reads it too: dial pelwarden over TLS " +
		"(as it does with `caCert`).", Treatment: Checked,
		Pelwarden: "Must equal `redis[].tls.enabled`. For TLS to pelwarden alone, give `caCert` in the TriggerAuthentication.", check: checkTLS},
	{Name: "unsafeSsl", KEDA: "Skip verifying Redis's certificate. Once moved, KEDA's external scaler skips verifying pelwarden's too.",
		Treatment: Checked, Pelwarden: "Must equal `redis[].tls.insecureSkipVerify`.", check: checkSkipVerify},
	{Name: "address", FromEnv: true, KEDA: "Comma list of `host:port`: the server, the cluster's seeds or the sentinels.", Treatment: Checked,
		Pelwarden: "Each must be one the connection dials: `addr`, one of `cluster.addrs` or of `sentinel.addrs`.", check: checkAddrs},
	{Name: "addresses", FromEnv: true, KEDA: "Read when `address` is not set; the same.", Treatment: Checked,
		Pelwarden: "As `address`.", check: checkAddrs},
	{Name: "host", FromEnv: true, KEDA: "Comma list of hosts, paired with `port` into addresses.", Treatment: Checked,
		Pelwarden: "Each must be the host of an address the connection dials, and each pair an address it dials.", check: checkHosts},
	{Name: "hosts", FromEnv: true, KEDA: "Read when `host` is not set; the same.", Treatment: Checked,
		Pelwarden: "As `host`.", check: checkHosts},
	{Name: "port", FromEnv: true, KEDA: "Comma list of ports, paired with `host`.", Treatment: Checked,
		Pelwarden: "Each must be the port of an address the connection dials.", check: checkPorts},
	{Name: "ports", FromEnv: true, KEDA: "Read when `port` is not set; the same.", Treatment: Checked,
		Pelwarden: "As `port`.", check: checkPorts},
	{Name: "sentinelMaster", FromEnv: true, KEDA: "The master's name at the sentinels.", Treatment: Checked,
		Pelwarden: "Must equal `sentinel.masterName` of a connection in mode `sentinel`.", check: checkMaster},
	{Name: "username", FromEnv: true, KEDA: "The ACL user.", Treatment: Credential,
		Pelwarden: "Never used: the connection's `username` is."},
	{Name: "password", FromEnv: true, KEDA: "The password.", Treatment: Credential,
		Pelwarden: "Never used: the connection's `passwordFile` or `passwordEnv` is."},
	{Name: "sentinelUsername", FromEnv: true, KEDA: "The sentinels' ACL user.", Treatment: Credential,
		Pelwarden: "Never used: the connection's `sentinel.username` is."},
	{Name: "sentinelPassword", FromEnv: true, KEDA: "The sentinels' password.", Treatment: Credential,
		Pelwarden: "Never used: the connection's `sentinel.passwordFile` or `passwordEnv` is."},
}

// Names is the key and, for a key KEDA also reads from the environment,
// its FromEnv form.
func (k KEDAKey) Names() []string {
	if k.FromEnv {
		return []string{k.Name, k.Name + envSuffix}
	}
	return []string{k.Name}
}

// IsSecret says a key's value is never kept, hashed into anything kept,
// logged or echoed: a credential, or any value KEDA resolved from the
// workload's environment (the FromEnv keys, whatever their name, since
// KEDA resolves every one it forwards).
func IsSecret(key string) bool {
	return strings.HasSuffix(key, envSuffix) || credentialSet[key]
}

var (
	credentialKeys = kedaNames(Credential)
	// credentialSet is credentialKeys as a set: IsSecret runs on every key
	// of every call.
	credentialSet = func() map[string]bool {
		m := map[string]bool{}
		for _, k := range credentialKeys {
			m[k] = true
		}
		return m
	}()
)

// kedaNames lists the key names, FromEnv forms included, of treatment t,
// in table order.
func kedaNames(t Treatment) []string {
	var out []string
	for _, k := range KEDAKeys {
		if k.Treatment == t {
			out = append(out, k.Names()...)
		}
	}
	return out
}

// CredentialKeys lists the credential keys md carries, in table order:
// they are reported by name only.
func CredentialKeys(md map[string]string) []string {
	var out []string
	for _, name := range credentialKeys {
		if _, ok := md[name]; ok {
			out = append(out, name)
		}
	}
	return out
}

// CredentialAdvice is what the operator is told about a trigger that
// carries credential keys (CredentialKeys): KEDA sends their values to
// pelwarden in clear text, and pelwarden uses its connection's own.
func CredentialAdvice(keys []string) string {
	return "remove " + strings.Join(keys, ", ") + " from the trigger: KEDA sends their values to pelwarden as plain metadata " +
		"(resolved from the workload's environment for the FromEnv keys), and pelwarden never uses them: the connection " +
		"in its configuration holds the credentials"
}
