package metadata

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// connEnv has a standalone connection on db 0, one on db 1 of the same
// server that namespace jobs may not reach, one on db 2 it may, a TLS
// connection, a cluster and a sentinel connection.
var connEnv = Env{
	Conns: []string{"default", "db1", "db2", "secure", "cluster", "ha"}, Namespace: "jobs",
	Connections: []Connection{
		{Name: "default", Addrs: []string{"redis.jobs.svc:6379"}},
		{Name: "db1", Addrs: []string{"redis.jobs.svc:6379"}, DB: 1},
		{Name: "db2", Addrs: []string{"redis.jobs.svc:6379"}, DB: 2},
		{Name: "secure", Addrs: []string{"redis-tls.jobs.svc:6380"}, TLS: true},
		{Name: "cluster", Addrs: []string{"node-0:6379", "node-1:6379", "node-2:6379"}, Cluster: true},
		{Name: "ha", Addrs: []string{"sentinel-0:26379", "sentinel-1:26379"}, SentinelMaster: "mymaster"},
	},
	Reaches: func(ns, conn string) bool { return conn != "db1" },
}

func connTrigger(kv ...string) map[string]string {
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "scalerAddress": "pelwarden:9090"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return md
}

// TestConnectionKeysThatAgreeWithTheConnectionAreServed: each connection
// key KEDA reads, written as the connection is, whatever the case of the
// host or a trailing dot, parses.
func TestConnectionKeysThatAgreeWithTheConnectionAreServed(t *testing.T) {
	t.Parallel()
	for name, md := range map[string]map[string]string{
		"standalone, every key": connTrigger("databaseIndex", "0", "enableTLS", "false", "unsafeSsl", "false",
			"address", "Redis.Jobs.Svc.:6379", "host", "redis.jobs.svc", "port", "6379", "hostFromEnv", "redis.jobs.svc", "portFromEnv", "6379"),
		"db 1 named":                           connTrigger("redis", "db1", "databaseIndex", "1"),
		"tls":                                  connTrigger("redis", "secure", "enableTLS", "true", "addresses", "redis-tls.jobs.svc:6380"),
		"cluster seeds, some":                  connTrigger("redis", "cluster", "addresses", "node-2:6379, node-0:6379", "databaseIndex", "0"),
		"cluster hosts, ports":                 connTrigger("redis", "cluster", "hosts", "node-0,node-1", "ports", "6379,6379"),
		"sentinels and master":                 connTrigger("redis", "ha", "addresses", "sentinel-1:26379", "sentinelMaster", "mymaster"),
		"resolved from the env":                connTrigger("redis", "ha", "addressesFromEnv", "sentinel-0:26379", "sentinelMasterFromEnv", "mymaster"),
		"empty values say nothing, as in KEDA": connTrigger("databaseIndex", " ", "address", ""),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseTrigger(md, connEnv)
			require.NoError(t, err)
			require.True(t, r.ConnectionKeys, "the keys are held to the connection on every call")
		})
	}
}

// TestConnectionKeysThatDisagreeAreRefusedNamingWhatTheConnectionHasAndTheFix:
// a trigger whose connection keys name another database, TLS setting,
// server or master than its connection is refused, naming the key, the
// connection's value and a configured connection that agrees and that the
// namespace may reach, or saying to add one.
func TestConnectionKeysThatDisagreeAreRefusedNamingWhatTheConnectionHasAndTheFix(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		md       map[string]string
		key      string
		mentions []string
	}{
		"db 2, which db2 reads": {md: connTrigger("databaseIndex", "2"), key: "databaseIndex",
			mentions: []string{`connection "default" reads db 0`, "set redis: db2", `got "2"`}},
		"db 1, which no reachable connection reads": {md: connTrigger("databaseIndex", "1"), key: "databaseIndex",
			mentions: []string{"reads db 0", "add one to pelwarden's configuration", "remove databaseIndex"}},
		"db 1 on a cluster": {md: connTrigger("redis", "cluster", "databaseIndex", "1"), key: "databaseIndex",
			mentions: []string{"a cluster has db 0 only"}},
		"a database index KEDA cannot read": {md: connTrigger("databaseIndex", "01"), key: "databaseIndex", mentions: []string{"whole number"}},
		"TLS asked of a plaintext connection": {md: connTrigger("enableTLS", "true", "address", "redis-tls.jobs.svc:6380"), key: "enableTLS",
			mentions: []string{"does not use TLS", "set redis: secure"}},
		"no TLS asked of a TLS connection": {md: connTrigger("redis", "secure", "enableTLS", "false"), key: "enableTLS", mentions: []string{"uses TLS"}},
		"verification skipped":             {md: connTrigger("unsafeSsl", "true"), key: "unsafeSsl", mentions: []string{"verifies the server's certificate"}},
		"another server": {md: connTrigger("address", "redis-other:6379"), key: "address",
			mentions: []string{"dials redis.jobs.svc:6379", `got "redis-other:6379"`}},
		"another port": {md: connTrigger("host", "redis.jobs.svc", "port", "6380"), key: "port", mentions: []string{"dials redis.jobs.svc:6379"}},
		"a host paired with the wrong port": {md: connTrigger("redis", "cluster", "hosts", "node-0,node-1", "ports", "6379,6380"),
			key: "ports", mentions: []string{"dials the cluster seeds"}},
		"hosts and ports unpaired": {md: connTrigger("redis", "cluster", "hosts", "node-0,node-1", "ports", "6379"), key: "ports",
			mentions: []string{"2 hosts, 1 ports"}},
		"a cluster node that is not a seed": {md: connTrigger("redis", "cluster", "addresses", "node-0:6379,node-9:6379"), key: "addresses",
			mentions: []string{"dials the cluster seeds node-0:6379"}},
		"another sentinel master": {md: connTrigger("redis", "ha", "sentinelMaster", "other"), key: "sentinelMaster",
			mentions: []string{`follows sentinel master "mymaster"`}},
		"a master on a standalone connection": {md: connTrigger("sentinelMaster", "mymaster"), key: "sentinelMaster",
			mentions: []string{"is not reached through sentinels (mode standalone)", "set redis: ha"}},
		"an address that is not host:port": {md: connTrigger("address", "redis://redis.jobs.svc:6379"), key: "address", mentions: []string{"host:port"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseTrigger(tc.md, connEnv)
			var me *Error
			require.ErrorAs(t, err, &me, "the trigger is refused")
			require.Equal(t, tc.key, me.Key, "error: %v", err)
			for _, m := range tc.mentions {
				require.Contains(t, err.Error(), m)
			}
			require.NotContains(t, err.Error(), "redis: db1", "db1 is a connection namespace jobs may not reach")
		})
	}
}

// TestValuesKEDAResolvedFromTheEnvironmentAreNeverQuoted: a FromEnv key
// that disagrees is refused by name; its value appears nowhere in the
// error, and a credential's nowhere in the request.
func TestValuesKEDAResolvedFromTheEnvironmentAreNeverQuoted(t *testing.T) {
	t.Parallel()
	const secret = "10.9.8.7:6379"
	_, err := ParseTrigger(connTrigger("addressFromEnv", secret), connEnv)
	var me *Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, "addressFromEnv", me.Key)
	require.Contains(t, err.Error(), "the value KEDA resolved from the workload's environment")
	require.NotContains(t, err.Error(), "10.9.8.7")

	const password = "hunter2-from-env"
	md := connTrigger("passwordFromEnv", password, "password", password, "username", "keda", "sentinelPasswordFromEnv", password)
	r, err := ParseTrigger(md, connEnv)
	require.NoError(t, err, "credentials never refuse the metric")
	require.Equal(t, []string{"username", "password", "passwordFromEnv", "sentinelPasswordFromEnv"}, r.Credentials)
	require.False(t, holds(reflect.ValueOf(r), password), "the request keeps no credential value")
	require.Contains(t, CredentialAdvice(r.Credentials), "remove username, password, passwordFromEnv, sentinelPasswordFromEnv")
}

// holds says v holds s anywhere in its strings.
func holds(v reflect.Value, s string) bool {
	switch v.Kind() {
	case reflect.String:
		return strings.Contains(v.String(), s)
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && holds(v.Elem(), s)
	case reflect.Struct:
		for i := range v.NumField() {
			if holds(v.Field(i), s) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if holds(v.Index(i), s) {
				return true
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if holds(k, s) || holds(v.MapIndex(k), s) {
				return true
			}
		}
	}
	return false
}

// TestNamesWithWhiteSpaceAroundThemAreRefused: KEDA trims every value, so
// " jobs" would be stream jobs to KEDA's scaler and another stream here.
func TestNamesWithWhiteSpaceAroundThemAreRefused(t *testing.T) {
	t.Parallel()
	for _, key := range []string{KeyStream, KeyConsumerGroup} {
		md := connTrigger(key, " jobs")
		_, err := ParseTrigger(md, connEnv)
		var me *Error
		require.ErrorAs(t, err, &me)
		require.Equal(t, key, me.Key)
		require.Contains(t, err.Error(), "white space")
	}
}

// kedaReads is every trigger metadata key KEDA v2.21.0's Redis Streams
// scalers read, from the keda: tags of redisStreamsMetadata and
// redisConnectionInfo (pkg/scalers/redis_streams_scaler.go and
// redis_scaler.go) whose order includes triggerMetadata, with the FromEnv
// form of those whose order includes resolvedEnv.
var kedaReads = []string{
	"pendingEntriesCount", "streamLength", "lagCount", "stream", "consumerGroup", "databaseIndex", "activationLagCount", "enableTLS",
	"address", "addresses", "addressFromEnv", "addressesFromEnv", "username", "usernameFromEnv", "password", "passwordFromEnv",
	"sentinelUsername", "sentinelUsernameFromEnv", "sentinelPassword", "sentinelPasswordFromEnv", "sentinelMaster", "sentinelMasterFromEnv",
	"host", "hosts", "hostFromEnv", "hostsFromEnv", "port", "ports", "portFromEnv", "portsFromEnv", "unsafeSsl",
}

// TestTheKEDATableHasEveryKeyKEDAReadsOnce, each with its texts, and a
// check for every Checked key.
func TestTheKEDATableHasEveryKeyKEDAReadsOnce(t *testing.T) {
	t.Parallel()
	var names []string
	for _, k := range KEDAKeys {
		require.NotEmpty(t, k.KEDA, k.Name)
		require.NotEmpty(t, k.Pelwarden, k.Name)
		require.Equal(t, k.Treatment == Checked, k.check != nil, "%s: a check exactly when Checked", k.Name)
		names = append(names, k.Names()...)
	}
	require.ElementsMatch(t, kedaReads, names)
	for _, n := range names {
		require.Equal(t, strings.HasSuffix(n, "FromEnv") || slices.Contains([]string{"username", "password", "sentinelUsername", "sentinelPassword"}, n),
			IsSecret(n), "IsSecret(%q)", n)
	}
	require.True(t, IsSecret("someOtherKeyFromEnv"), "any value KEDA resolved is secret")
}

// TestEveryCheckedKeyIsRefusedWhenItDisagrees: for each Checked key and
// its FromEnv form, a value naming another server, database, setting or
// master than the connection's refuses the trigger naming that key.
// Removing a check makes this fail.
func TestEveryCheckedKeyIsRefusedWhenItDisagrees(t *testing.T) {
	t.Parallel()
	other := map[string]string{
		"databaseIndex": "3", "enableTLS": "true", "unsafeSsl": "true", "address": "elsewhere:6379", "addresses": "elsewhere:6379",
		"host": "elsewhere", "hosts": "elsewhere", "port": "7000", "ports": "7000", "sentinelMaster": "other",
	}
	var tried []string
	for _, k := range KEDAKeys {
		if k.Treatment != Checked {
			continue
		}
		for _, name := range k.Names() {
			tried = append(tried, name)
			_, err := ParseTrigger(connTrigger(name, other[k.Name]), connEnv)
			var me *Error
			require.ErrorAs(t, err, &me, "%s=%s is refused", name, other[k.Name])
			require.Equal(t, name, me.Key, "error: %v", err)
		}
	}
	require.Equal(t, slices.Sorted(maps.Keys(checks)), slices.Sorted(slices.Values(tried)))
	require.Len(t, tried, 17, fmt.Sprint(tried))
}

// FuzzCheckConnection: whatever the connection keys hold, the check never
// panics, a refusal names a connection key, a value resolved from the
// environment is never quoted, and a trigger is served only where every
// address it names is one its connection dials.
func FuzzCheckConnection(f *testing.F) {
	f.Add("redis.jobs.svc:6379", "redis.jobs.svc", "6379", "0", "false", "secret-addr:1")
	f.Add("node-0:6379, node-9:6379", "a,b", "1,2,3", "01", "maybe", "[::1]:6379")
	f.Add("", "", "", "", "", "")
	f.Add("REDIS.jobs.svc.:6379", "Redis.Jobs.Svc", "06379", " 0 ", "1", "redis.jobs.svc:6379")
	f.Fuzz(func(t *testing.T, address, host, port, db, tls, fromEnv string) {
		md := connTrigger("address", address, "host", host, "port", port, "databaseIndex", db, "enableTLS", tls, "addressFromEnv", fromEnv)
		err := CheckConnection(md, "default", connEnv)
		if err == nil {
			for _, v := range []string{address, fromEnv} {
				for _, a := range list(v) {
					if strings.TrimSpace(v) != "" && normAddr(a) != "redis.jobs.svc:6379" {
						t.Fatalf("served a trigger naming %q, which connection default does not dial", a)
					}
				}
			}
			return
		}
		var me *Error
		if !errors.As(err, &me) || !slices.Contains(connectionKeys, me.Key) {
			t.Fatalf("a refusal must name a connection key: %v", err)
		}
		if me.Key == "addressFromEnv" && (me.Got != "" || (len(fromEnv) > 3 && strings.Contains(err.Error(), fromEnv) && !strings.Contains("redis.jobs.svc:6379", fromEnv))) {
			t.Fatalf("quoted the value KEDA resolved from the environment: %v", err)
		}
	})
}
