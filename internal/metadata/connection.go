package metadata

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Connection is how pelwarden's configuration reaches one Redis
// connection: what the connection keys of a trigger moved from KEDA's
// scalers (KEDAKeys, Checked) are held to.
type Connection struct {
	Name string
	// Addrs are the host:port addresses the connection dials: its addr,
	// its cluster's seeds, or its sentinels.
	Addrs []string
	// Cluster says the connection is a Redis Cluster, which has db 0 only.
	Cluster bool
	// SentinelMaster is the master's name in mode sentinel, "" otherwise.
	SentinelMaster string
	DB             int
	// TLS and InsecureSkipVerify are redis[].tls.enabled and
	// insecureSkipVerify.
	TLS, InsecureSkipVerify bool
}

// describe says where the connection's addresses lead.
func (c Connection) describe() string {
	addrs := strings.Join(c.Addrs, ", ")
	switch {
	case c.Cluster:
		return "dials the cluster seeds " + addrs
	case c.SentinelMaster != "":
		return "finds its master through the sentinels " + addrs
	}
	return "dials " + addrs
}

// connectionKeys are the Checked keys and their FromEnv forms, in table
// order: the order their disagreements are reported in.
var connectionKeys = kedaNames(Checked)

// checks are the Checked rows' checks by key name, FromEnv forms included.
var checks = func() map[string]func(string, Connection) (string, bool, string) {
	m := map[string]func(string, Connection) (string, bool, string){}
	for _, k := range KEDAKeys {
		for _, name := range k.Names() {
			if k.check != nil {
				m[name] = k.check
			}
		}
	}
	return m
}()

// hasConnectionKeys says md carries a connection key, which CheckConnection
// must then hold to the connection on every call.
func hasConnectionKeys(md map[string]string) bool {
	for _, k := range connectionKeys {
		if _, ok := md[k]; ok {
			return true
		}
	}
	return false
}

// disagreement is the first connection key of a trigger that a connection
// does not agree with.
type disagreement struct {
	key string
	// have says what the connection has; malformed, when set, what the
	// key accepts instead.
	have, malformed string
	got             string
}

// CheckConnection holds the connection keys of md (KEDAKeys, Checked) to
// the connection named conn. KEDA forwards every key of a moved trigger,
// and its scaler would read the database, server, TLS setting or sentinel
// master they name: a key that names another is refused, naming the key,
// what the connection has and the fix, never served from the connection
// silently. KEDA's empty values (and FromEnv keys it did not resolve,
// which it leaves out) say nothing and are skipped. A value KEDA resolved
// from the workload's environment is never quoted. It keeps nothing, so it
// runs on every call: the parse cache keeps no such value to compare.
func CheckConnection(md map[string]string, conn string, env Env) error {
	if !hasConnectionKeys(md) {
		return nil
	}
	c, known := env.connection(conn)
	d := disagree(md, c)
	switch {
	case d == nil:
		return nil
	case !known:
		return &Error{Key: d.key, Accepted: fmt.Sprintf("cannot be checked: pelwarden knows no addresses of connection %q; remove it", conn)}
	}
	if d.malformed != "" {
		return &Error{Key: d.key, Accepted: d.malformed, Got: d.got}
	}
	named := "what this trigger names"
	if IsSecret(d.key) {
		named = "the value KEDA resolved from the workload's environment"
	}
	return &Error{Key: d.key, Got: d.got, Accepted: fmt.Sprintf("connection %q %s, not %s; %s", c.Name, d.have, named, fix(md, d.key, c, env))}
}

// fix names the configured connections that agree with every connection
// key of md and that the namespace may reach; or, when none does, says to
// add one.
func fix(md map[string]string, key string, c Connection, env Env) string {
	var agree []string
	for _, o := range env.Connections {
		if o.Name != c.Name && disagree(md, o) == nil && (env.Reaches == nil || env.Reaches(env.Namespace, o.Name)) {
			agree = append(agree, fmt.Sprintf("%s: %s", KeyRedis, o.Name))
		}
	}
	if len(agree) > 0 {
		return "set " + strings.Join(agree, " or ") + ", a connection that agrees with every connection key of this trigger"
	}
	return fmt.Sprintf("no connection this namespace may reach agrees with this trigger: add one to pelwarden's configuration (redis[]) "+
		"and name it with %s, or remove %s if connection %q is the one meant", KeyRedis, key, c.Name)
}

// disagree returns the first connection key of md that c does not agree
// with, in table order, then the host and port pairs KEDA would join.
func disagree(md map[string]string, c Connection) *disagreement {
	for _, k := range connectionKeys {
		v := strings.TrimSpace(md[k])
		if v == "" {
			continue
		}
		got := v
		if IsSecret(k) {
			got = ""
		}
		have, ok, malformed := checks[k](v, c)
		if malformed != "" || !ok {
			return &disagreement{key: k, have: have, malformed: malformed, got: got}
		}
	}
	return disagreePairs(md, c)
}

// disagreePairs joins hosts and ports as KEDA does (the first of host,
// hosts and their FromEnv forms that has a value, with the first such of
// port and ports) and holds each pair to the connection's addresses.
func disagreePairs(md map[string]string, c Connection) *disagreement {
	hostKey, hosts := first(md, "host", "hosts", "host"+envSuffix, "hosts"+envSuffix)
	portKey, ports := first(md, "port", "ports", "port"+envSuffix, "ports"+envSuffix)
	if hosts == nil || ports == nil {
		return nil
	}
	if len(hosts) != len(ports) {
		return &disagreement{key: portKey, malformed: fmt.Sprintf("KEDA pairs each host of %s with a port: %d hosts, %d ports", hostKey, len(hosts), len(ports))}
	}
	for i := range hosts {
		if !slices.Contains(normAddrs(c.Addrs), normAddr(net.JoinHostPort(hosts[i], ports[i]))) {
			return &disagreement{key: hostKey, have: c.describe() + fmt.Sprintf(" (%s and %s are paired into addresses)", hostKey, portKey)}
		}
	}
	return nil
}

// first returns the first of keys with a value in md, and its comma list.
func first(md map[string]string, keys ...string) (string, []string) {
	for _, k := range keys {
		if v := strings.TrimSpace(md[k]); v != "" {
			return k, list(v)
		}
	}
	return "", nil
}

// list splits a comma list as KEDA does, trimming each item.
func list(v string) []string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

func checkDB(v string, c Connection) (string, bool, string) {
	var n int
	if err := json.Unmarshal([]byte(v), &n); err != nil {
		return "", false, "must be a whole number, as KEDA reads it"
	}
	have := fmt.Sprintf("reads db %d", c.DB)
	if c.Cluster {
		have += " (a cluster has db 0 only)"
	}
	return have, n == c.DB, ""
}

func checkTLS(v string, c Connection) (string, bool, string) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return "", false, "must be true or false, as KEDA reads it"
	}
	if c.TLS {
		return "uses TLS (tls.enabled)", b, ""
	}
	return "does not use TLS (tls.enabled)", !b, ""
}

func checkSkipVerify(v string, c Connection) (string, bool, string) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return "", false, "must be true or false, as KEDA reads it"
	}
	if c.InsecureSkipVerify {
		return "skips verifying the server's certificate (tls.insecureSkipVerify)", b, ""
	}
	return "verifies the server's certificate (tls.insecureSkipVerify)", !b, ""
}

func checkAddrs(v string, c Connection) (string, bool, string) {
	have := normAddrs(c.Addrs)
	for _, a := range list(v) {
		n := normAddr(a)
		if n == "" {
			return "", false, "must be a comma list of host:port, as KEDA dials them"
		}
		if !slices.Contains(have, n) {
			return c.describe(), false, ""
		}
	}
	return c.describe(), true, ""
}

func checkHosts(v string, c Connection) (string, bool, string) {
	var have []string
	for _, a := range normAddrs(c.Addrs) {
		h, _, _ := net.SplitHostPort(a)
		have = append(have, h)
	}
	for _, h := range list(v) {
		if !slices.Contains(have, normHost(h)) {
			return c.describe(), false, ""
		}
	}
	return c.describe(), true, ""
}

func checkPorts(v string, c Connection) (string, bool, string) {
	var have []string
	for _, a := range normAddrs(c.Addrs) {
		_, p, _ := net.SplitHostPort(a)
		have = append(have, p)
	}
	for _, p := range list(v) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", false, "must be a comma list of port numbers, as KEDA dials them"
		}
		if !slices.Contains(have, strconv.Itoa(n)) {
			return c.describe(), false, ""
		}
	}
	return c.describe(), true, ""
}

func checkMaster(v string, c Connection) (string, bool, string) {
	if c.SentinelMaster == "" {
		return "is not reached through sentinels (mode " + c.mode() + ")", false, ""
	}
	return fmt.Sprintf("follows sentinel master %q", c.SentinelMaster), v == c.SentinelMaster, ""
}

func (c Connection) mode() string {
	switch {
	case c.Cluster:
		return "cluster"
	case c.SentinelMaster != "":
		return "sentinel"
	}
	return "standalone"
}

// normAddr is host:port with the host in lower case, without a trailing
// dot or brackets, and the port as a number; "" when a is not host:port.
func normAddr(a string) string {
	h, p, err := net.SplitHostPort(strings.TrimSpace(a))
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil || h == "" || n < 1 || n > 65535 {
		return ""
	}
	return net.JoinHostPort(normHost(h), strconv.Itoa(n))
}

func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(strings.TrimSpace(h), "[]")), ".")
}

func normAddrs(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, normAddr(a))
	}
	return out
}

// connection returns the connection named name.
func (e Env) connection(name string) (Connection, bool) {
	for _, c := range e.Connections {
		if c.Name == name {
			return c, true
		}
	}
	return Connection{}, false
}
