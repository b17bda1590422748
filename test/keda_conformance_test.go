//go:build kube

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// conformance is one trigger of KEDA's Redis Streams scalers, polled by
// KEDA's own scaler code and, moved by the documented two lines, by KEDA's
// external scaler client against pelwarden.
type conformance struct {
	name  string
	setup string
	typ   string
	// md is KEDA's trigger metadata; auth its TriggerAuthentication's
	// parameters; env the workload's environment.
	md, auth, env map[string]string
	// extra are keys the moved trigger gets besides the two lines.
	extra map[string]string
	// ghost is what the ghost holds that pelwarden leaves out of the metric.
	ghost int64
	// refuses is the key pelwarden's refusal names; "" expects KEDA's
	// number.
	refuses string
	// kedaFails says why KEDA's scaler answers an error where pelwarden
	// serves: the trigger names nothing pelwarden could serve from
	// elsewhere.
	kedaFails string
}

// TestRealKEDAConformanceMovedTriggersGetKEDAsNumberOrARefusalNamingTheKey
// is the contract with KEDA's Redis Streams scalers (docs/reference/
// keda-keys.md) on real Redis: every example of KEDA v2.21's documentation
// for the three scalers and the cases beside them, on a server (and its
// db 1), a TLS server, a 3-master cluster and a sentinel set. KEDA's value
// comes from keda-oracle, KEDA's own scaler code; pelwarden's through
// KEDA's own external scaler client, after the two-line move. Each case
// gets KEDA's metric, target and activity (less what a ghost holds), or an
// InvalidArgument naming the key it cannot honor; a key pelwarden
// ignored while KEDA's scaler read it fails the case. The table of both
// values is logged.
func TestRealKEDAConformanceMovedTriggersGetKEDAsNumberOrARefusalNamingTheKey(t *testing.T) {
	o := startOracle(t)
	g := newGRPCMTLS(t)
	backends := map[string]*redisSetup{}
	for name, start := range map[string]func(*testing.T, *grpcMTLS) *redisSetup{
		"plain": startPlainBackend, "tls": startTLSBackend, "cluster": startClusterBackend, "sentinel": startSentinelBackend,
	} {
		backends[name] = start(t, g)
	}
	ghost := ghostly(t, backends["plain"])
	cases := append(documentedCases(t, backends), listedCases(backends, ghost)...)
	var table []string
	for _, c := range cases {
		b := backends[c.setup]
		if c.typ == "" {
			c.typ = "redis-streams"
		}
		for k, v := range c.md {
			if v == "" {
				delete(c.md, k)
			}
		}
		keda := o.poll(t, c.typ, c.md, c.auth, c.env)
		var pw answer
		ok := t.Run(c.name, func(t *testing.T) { conform(t, o, b, g, c, keda, &pw) })
		mark := ""
		if !ok {
			mark = "  <- FAILED"
		}
		table = append(table, fmt.Sprintf("| %s | %s | %s | %s |%s", c.name, c.setup, keda, pelwardenCell(pw), mark))
	}
	t.Logf("case | setup | KEDA's scaler | pelwarden, moved\n%s", strings.Join(table, "\n"))
	for _, b := range backends {
		require.NotContains(t, b.pw.logs.String(), kedaPassword, "%s: the password KEDA forwarded is in no log line", b.name)
	}
}

func pelwardenCell(a answer) string {
	if a.Error == "" {
		return a.String()
	}
	_, msg, _ := strings.Cut(a.Error, "desc = ")
	return "refused: " + msg
}

// conform polls pelwarden with the moved trigger, into pw, and holds its
// answer to KEDA's. A ghost case polls until the ghost is judged.
func conform(t *testing.T, o oracle, b *redisSetup, g *grpcMTLS, c conformance, keda answer, into *answer) {
	t.Helper()
	md := moveTrigger(c.md, b.pw.app.GRPCAddr(), c.extra)
	var pw answer
	deadline := time.Now().Add(10 * time.Second)
	for {
		pw = o.poll(t, "external", md, g.kedaAuth, c.env)
		*into = pw
		if c.ghost == 0 || pw.Error != "" || pw.Metric == keda.Metric-float64(c.ghost) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotContains(t, pw.Error, kedaPassword)
	switch {
	case c.refuses != "" && pw.Error == "":
		t.Fatalf("pelwarden served %s where KEDA's scaler reads %s; it must refuse, naming %s: the key was silently ignored",
			pw, keda, c.refuses)
	case c.refuses != "":
		require.Contains(t, pw.Error, "InvalidArgument")
		require.Contains(t, pw.Error, fmt.Sprintf("metadata %q", c.refuses), "the refusal names the key")
	case pw.Error != "":
		t.Fatalf("pelwarden refused where KEDA's scaler reads %s: %s", keda, pw.Error)
	case keda.Error != "":
		require.NotEmpty(t, c.kedaFails, "pelwarden served %s where KEDA's scaler fails: %s", pw, keda.Error)
	default:
		want := keda.Metric - float64(c.ghost)
		activation, _ := strconv.ParseFloat(c.md["activationLagCount"], 64)
		if pw.Metric != want || pw.Target != keda.Target || pw.Active != (want > activation) {
			t.Fatalf("pelwarden served %s where KEDA's scaler reads %s, less %d held by the ghost: a key was silently ignored or misread", pw, keda, c.ghost)
		}
	}
}

// moveTrigger makes KEDA's trigger an external one by the documented two
// lines: its address line (address, addresses or their FromEnv form)
// becomes scalerAddress. extra keys are added after.
func moveTrigger(md map[string]string, scaler string, extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		out[k] = v
	}
	for _, k := range []string{"address", "addresses", "addressFromEnv", "addressesFromEnv"} {
		if _, ok := out[k]; ok {
			delete(out, k)
			break
		}
	}
	out["scalerAddress"] = scaler
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// documentedCases are the examples of KEDA's documentation pages for the
// three scalers (internal/metadata/testdata/keda), each on the setup of
// its trigger's type, with the documentation's addresses, Secrets and
// environment variables made this test's. The cluster and sentinel sets
// here speak plaintext: their third example's TLS parameters are left
// out, the redis-streams one runs on the TLS server.
func documentedCases(t *testing.T, backends map[string]*redisSetup) []conformance {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "internal", "metadata", "testdata", "keda", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 15, "five examples for each of the three scalers")
	var out []conformance
	for _, f := range files {
		typ, params, md := documentedTrigger(t, f)
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		be := map[string]string{"redis-streams": "plain", "redis-cluster-streams": "cluster", "redis-sentinel-streams": "sentinel"}[typ]
		if len(params) > 0 && be == "plain" {
			be = "tls"
		}
		b := backends[be]
		c := conformance{name: "example " + name, setup: be, typ: typ, md: map[string]string{}, env: map[string]string{}}
		for k, v := range md {
			base, fromEnv := strings.CutSuffix(k, "FromEnv")
			if fromEnv {
				c.env[v] = b.value(base, v)
			} else if s := b.value(k, ""); s != "" {
				v = s
			}
			c.md[k] = v
		}
		c.auth = b.params(params)
		switch {
		case md["consumerGroup"] == "":
			c.refuses = "consumerGroup"
		case typ == "redis-sentinel-streams" && md["sentinelMaster"] == "":
			c.kedaFails = "the example names no sentinelMaster"
		}
		out = append(out, c)
	}
	return out
}

// value is what a documented key or environment variable holds here: the
// setup's addresses, hosts or ports, or KEDA's credentials; "" for a key
// that stays as written.
func (b *redisSetup) value(key, env string) string {
	var hosts, ports []string
	for _, a := range b.addrs {
		h, p, _ := net.SplitHostPort(a)
		hosts, ports = append(hosts, h), append(ports, p)
	}
	switch key {
	case "address", "addresses":
		return strings.Join(b.addrs, ", ")
	case "host", "hosts":
		return strings.Join(hosts, ",")
	case "port", "ports":
		return strings.Join(ports, ",")
	case "username":
		return kedaUser
	case "password":
		return kedaPassword
	}
	if env != "" {
		panic("no value for environment variable " + env + " of key " + key)
	}
	return ""
}

// params are the values of a documented TriggerAuthentication's
// parameters here; TLS parameters only where the setup speaks TLS.
func (b *redisSetup) params(names []string) map[string]string {
	out := map[string]string{}
	for _, p := range names {
		switch {
		case p == "tls" && b.auth != nil:
			out[p] = "enable"
		case b.auth[p] != "":
			out[p] = b.auth[p]
		case p == "username" || p == "password":
			out[p] = b.value(p, "")
		}
	}
	return out
}

// documentedTrigger reads the one trigger of a documentation example and
// the parameters of its TriggerAuthentication, if any.
func documentedTrigger(t *testing.T, path string) (typ string, params []string, md map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, path)
		if doc["kind"] == "TriggerAuthentication" {
			for _, r := range doc["spec"].(map[string]any)["secretTargetRef"].([]any) {
				params = append(params, r.(map[string]any)["parameter"].(string))
			}
		}
		spec, _ := doc["spec"].(map[string]any)
		if spec == nil {
			spec = doc
		}
		for _, tr := range asSlice(spec["triggers"]) {
			m := tr.(map[string]any)
			typ, md = m["type"].(string), map[string]string{}
			for k, v := range m["metadata"].(map[string]any) {
				md[k] = v.(string)
			}
		}
	}
	require.NotEmpty(t, typ, path)
	slices.Sort(params)
	return typ, params, md
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// listedCases are the cases beside the documentation: each metric key,
// activation, no target key, databaseIndex 0 and 1, TLS, cluster nodes,
// the sentinel master, a group not created yet, and ghosts. Where a case
// names another server, database, setting or master than pelwarden's
// connection, pelwarden must refuse naming the key.
func listedCases(bs map[string]*redisSetup, ghost int64) []conformance {
	plain, secure, cluster, sentinel := bs["plain"], bs["tls"], bs["cluster"], bs["sentinel"]
	on := func(b *redisSetup, kv ...string) map[string]string {
		md := map[string]string{"stream": "my-stream", "consumerGroup": "my-consumer-group"}
		key := "address"
		if len(b.addrs) > 1 || b.master != "" {
			key = "addresses"
		}
		md[key] = strings.Join(b.addrs, ",")
		for i := 0; i+1 < len(kv); i += 2 {
			md[kv[i]] = kv[i+1]
		}
		return md
	}
	hosts, ports := func(b *redisSetup) string { return b.value("hosts", "") }, func(b *redisSetup) string { return b.value("ports", "") }
	heartbeats := map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}
	creds := map[string]string{"username": kedaUser, "password": kedaPassword}
	return []conformance{
		{name: "pendingEntriesCount", setup: "plain", md: on(plain, "pendingEntriesCount", "4")},
		{name: "lagCount", setup: "plain", md: on(plain, "lagCount", "3")},
		{name: "streamLength with a group", setup: "plain", md: on(plain, "streamLength", "50")},
		{name: "activationLagCount, pending at it", setup: "plain", md: on(plain, "pendingEntriesCount", "5", "activationLagCount", "12")},
		{name: "activationLagCount, lag above it", setup: "plain", md: on(plain, "lagCount", "3", "activationLagCount", "7")},
		{name: "no target key", setup: "plain", md: on(plain)},
		{name: "lagCount, group not created yet", setup: "plain", md: on(plain, "consumerGroup", "not-yet", "lagCount", "2")},
		{name: "databaseIndex 0", setup: "plain", md: on(plain, "databaseIndex", "0")},
		{name: "databaseIndex 1", setup: "plain", md: on(plain, "databaseIndex", "1"), refuses: "databaseIndex"},
		{name: "databaseIndex 1, redis: db1", setup: "plain", md: on(plain, "databaseIndex", "1"), extra: map[string]string{"redis": "db1"}},
		{name: "host and port of the server", setup: "plain", md: on(plain, "host", hosts(plain), "port", ports(plain))},
		{name: "host and port of another server", setup: "plain", md: on(plain, "address", "", "host", "127.0.0.1", "port", ports(secure)),
			refuses: "port"},
		{name: "credentials from the environment", setup: "plain", md: on(plain, "usernameFromEnv", "REDIS_USERNAME", "passwordFromEnv", "REDIS_PASSWORD"),
			env: map[string]string{"REDIS_USERNAME": kedaUser, "REDIS_PASSWORD": kedaPassword}},
		{name: "TLS", setup: "tls", md: on(secure, "enableTLS", "true"), auth: merge(secure.auth, creds)},
		{name: "TLS asked of a plaintext server", setup: "plain", md: on(plain, "enableTLS", "true"), auth: merge(secure.auth), refuses: "enableTLS"},
		{name: "TLS without verifying", setup: "tls", md: on(secure, "enableTLS", "true", "unsafeSsl", "true"), auth: merge(secure.auth),
			refuses: "unsafeSsl"},
		{name: "cluster, hosts and ports of every node", setup: "cluster", typ: "redis-cluster-streams",
			md: on(cluster, "hosts", hosts(cluster), "ports", ports(cluster))},
		{name: "cluster, a node of another server", setup: "cluster", typ: "redis-cluster-streams",
			md: on(cluster, "addresses", "", "hosts", "127.0.0.1", "ports", ports(plain)), refuses: "ports"},
		{name: "cluster, databaseIndex 1", setup: "cluster", typ: "redis-cluster-streams", md: on(cluster, "databaseIndex", "1"), refuses: "databaseIndex"},
		{name: "sentinel master", setup: "sentinel", typ: "redis-sentinel-streams", md: on(sentinel, "sentinelMaster", "myprimary", "lagCount", "4")},
		{name: "another sentinel master", setup: "sentinel", typ: "redis-sentinel-streams", md: on(sentinel, "sentinelMaster", "other"),
			refuses: "sentinelMaster"},
		{name: "ghosts, pendingEntriesCount", setup: "plain", md: on(plain, "stream", "ghostly", "consumerGroup", "workers", "pendingEntriesCount", "2"),
			extra: heartbeats, ghost: ghost},
		{name: "ghosts, lagCount", setup: "plain", md: on(plain, "stream", "ghostly", "consumerGroup", "workers", "lagCount", "2"),
			extra: heartbeats},
	}
}

// merge copies maps into one.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
