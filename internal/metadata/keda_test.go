package metadata

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/pelwarden/pelwarden/internal/policy"
)

// kedaStreamTypes are KEDA's scalers whose metadata a trigger of type
// external may carry over unchanged.
var kedaStreamTypes = []string{"redis-streams", "redis-cluster-streams", "redis-sentinel-streams"}

// kedaTriggers reads every trigger of KEDA's stream scalers in a file of
// KEDA's documentation examples, in document order.
func kedaTriggers(t *testing.T, path string) []map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var found []map[string]string
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, path)
		found = appendTriggers(t, found, doc)
	}
	return found
}

func appendTriggers(t *testing.T, found []map[string]string, node any) []map[string]string {
	switch n := node.(type) {
	case map[string]any:
		if typ, ok := n["type"].(string); ok && slices.Contains(kedaStreamTypes, typ) {
			md := map[string]string{}
			for k, v := range n["metadata"].(map[string]any) {
				s, ok := v.(string)
				require.True(t, ok, "metadata %q is a string in KEDA's examples", k)
				md[k] = s
			}
			return append(found, md)
		}
		for _, v := range n {
			found = appendTriggers(t, found, v)
		}
	case []any:
		for _, v := range n {
			found = appendTriggers(t, found, v)
		}
	}
	return found
}

// kedaDocEnv is a pelwarden whose connection default is where each
// scaler's documentation examples point: localhost:6379, the cluster
// nodes, the sentinels of master myprimary. The sentinel page's first
// example names no master and its fifth is a redis-cluster-streams trigger.
var kedaDocEnv = map[string]Env{
	"redis-streams": {Conns: []string{"default"}, Connections: []Connection{{Name: "default", Addrs: []string{"localhost:6379"}}}},
	"redis-cluster-streams": {Conns: []string{"default"}, Connections: []Connection{{Name: "default", Cluster: true,
		Addrs: []string{"localhost:6379", "node1:6379", "node2:6379", "node3:6379"}}}},
	"redis-sentinel-streams": {Conns: []string{"default"}, Connections: []Connection{{Name: "default", SentinelMaster: "myprimary",
		Addrs: []string{"localhost:26379", "node1:26379", "node2:26379", "node3:26379"}}}},
}

// kedaDocWorkload is the environment of the examples' workloads, from
// which KEDA resolves their FromEnv keys: the same server as the
// connection, and KEDA's credentials.
func kedaDocWorkload(typ string) map[string]string {
	port := "6379"
	if typ == "redis-sentinel-streams" {
		port = "26379"
	}
	return map[string]string{
		"REDIS_ADDRESS": "localhost:" + port, "REDIS_HOST": "localhost", "REDIS_PORT": port,
		"REDIS_ADDRESSES": "localhost:" + port, "REDIS_HOSTS": "localhost", "REDIS_PORTS": port,
		"REDIS_USERNAME": "keda", "REDIS_PASSWORD": "s3cret-from-env",
	}
}

// moved is a trigger of KEDA's stream scalers moved by the documented two
// lines (the type, and the address line, which becomes scalerAddress),
// as KEDA then forwards it to an external scaler: each FromEnv key holds
// the value KEDA resolved from env, and is left out when env has none.
func moved(md, env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		out[k] = v
	}
	for _, k := range []string{"address", "addresses", "addressFromEnv", "addressesFromEnv"} {
		if _, ok := out[k]; ok {
			delete(out, k)
			out["scalerAddress"] = "pelwarden.pelwarden.svc:9090"
			break
		}
	}
	for k, v := range out {
		if strings.HasSuffix(k, "FromEnv") {
			if env[v] == "" {
				delete(out, k)
			} else {
				out[k] = env[v]
			}
		}
	}
	return out
}

// TestKEDAsDocumentedStreamTriggersMeanTheSameMetric loads every example of
// KEDA's v2.21 documentation for its three stream scalers, moves it by the
// documented two lines, and checks that pelwarden reads the metric KEDA's
// scaler reads: lagCount over pendingEntriesCount, streamLength ignored
// beside a group, and activationLagCount the activation of whichever
// metric is chosen. The connection keys left behind agree with the
// connection; the credentials KEDA forwards are named, to be removed. The
// example without a group (KEDA's XLEN metric) is refused, naming
// consumerGroup and streamLength.
func TestKEDAsDocumentedStreamTriggersMeanTheSameMetric(t *testing.T) {
	t.Parallel()
	type want struct {
		metric      policy.Metric
		target      float64
		activation  float64
		errKey      string
		credentials []string
	}
	fromEnv := []string{"usernameFromEnv", "passwordFromEnv"}
	// Each scaler's page has the same five examples, in this order.
	examples := []want{
		{metric: policy.Lag, target: 5, activation: 3, credentials: fromEnv}, // all three metric keys in one trigger
		{metric: policy.Pending, target: 10, credentials: fromEnv},
		{metric: policy.Pending, target: 10}, // beside a Secret and a TriggerAuthentication
		{errKey: "consumerGroup"},            // streamLength without a group
		{metric: policy.Lag, target: 10, activation: 3, credentials: fromEnv},
	}
	for _, typ := range kedaStreamTypes {
		for i, w := range examples {
			path := filepath.Join("testdata", "keda", typ+"-"+string(rune('1'+i))+".yaml")
			t.Run(filepath.Base(path), func(t *testing.T) {
				t.Parallel()
				triggers := kedaTriggers(t, path)
				require.Len(t, triggers, 1, "one %s trigger in %s", typ, path)
				md := moved(triggers[0], kedaDocWorkload(typ))
				require.NoError(t, CheckTriggerBounds("default", "redis-streams-scaledobject", md))
				r, err := ParseTrigger(md, kedaDocEnv[typ])
				if w.errKey != "" {
					var me *Error
					require.ErrorAs(t, err, &me)
					require.Equal(t, w.errKey, me.Key)
					require.Contains(t, err.Error(), "streamLength")
					return
				}
				require.NoError(t, err)
				require.Equal(t, w.metric, r.Metric)
				require.InDelta(t, w.target, r.TargetValue, 0)
				require.InDelta(t, w.activation, r.Activation, 0)
				require.Equal(t, md["stream"], r.Target.Stream)
				require.Equal(t, md["consumerGroup"], r.Target.Group)
				require.Equal(t, w.credentials, r.Credentials)
			})
		}
	}
}

func TestKEDAsPrecedenceForKEDAsKeysAndErrorsForPelwardensOwn(t *testing.T) {
	t.Parallel()
	ok := map[string]struct {
		md         map[string]string
		metric     policy.Metric
		target     float64
		activation float64
	}{
		"lag wins over pending":                 {md: base("pendingEntriesCount", "10", "lagCount", "4"), metric: policy.Lag, target: 4},
		"stream length ignored beside a group":  {md: base("streamLength", "50"), metric: policy.Pending, target: DefaultPendingEntriesCount},
		"activationLagCount activates pending":  {md: base("pendingEntriesCount", "10", "activationLagCount", "2"), metric: policy.Pending, target: 10, activation: 2},
		"pelwarden's pending activation stays":  {md: base("activationPendingEntriesCount", "7"), metric: policy.Pending, target: DefaultPendingEntriesCount, activation: 7},
		"backlog alone with its own activation": {md: base("backlogCount", "3", "activationBacklogCount", "1", "streamLength", "9"), metric: policy.Backlog, target: 3, activation: 1},
	}
	for name, tc := range ok {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, err := Parse(tc.md, testEnv)
			require.NoError(t, err)
			require.Equal(t, tc.metric, r.Metric)
			require.InDelta(t, tc.target, r.TargetValue, 0)
			require.InDelta(t, tc.activation, r.Activation, 0)
		})
	}
	bad := map[string]struct {
		md       map[string]string
		key      string
		mentions []string
	}{
		"backlog beside pending":            {md: base("backlogCount", "3", "pendingEntriesCount", "5"), key: "backlogCount", mentions: []string{"pendingEntriesCount"}},
		"backlog beside lag":                {md: base("backlogCount", "3", "lagCount", "5", "pendingEntriesCount", "5"), key: "backlogCount", mentions: []string{"lagCount"}},
		"both pending activations":          {md: base("activationPendingEntriesCount", "1", "activationLagCount", "2"), key: "activationPendingEntriesCount", mentions: []string{"activationLagCount"}},
		"lag activation with backlog":       {md: base("backlogCount", "3", "activationLagCount", "2"), key: "activationLagCount", mentions: []string{"activationBacklogCount"}},
		"malformed pending beside lag":      {md: base("lagCount", "5", "pendingEntriesCount", "ten"), key: "pendingEntriesCount", mentions: []string{">= 0"}},
		"malformed stream length":           {md: base("streamLength", "-1"), key: "streamLength", mentions: []string{">= 0"}},
		"stream length without a group":     {md: map[string]string{"stream": "s", "streamLength": "50"}, key: "consumerGroup", mentions: []string{"streamLength", "XLEN"}},
		"no group and no stream length key": {md: map[string]string{"stream": "s"}, key: "consumerGroup", mentions: []string{"required"}},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.md, testEnv)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tc.key, me.Key, "error: %v", err)
			for _, m := range tc.mentions {
				require.Contains(t, err.Error(), m)
			}
		})
	}
}
