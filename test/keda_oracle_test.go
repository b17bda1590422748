//go:build kube

package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// oracle is KEDA v2.21's own scaler code answering one poll
// (../shared/keda/INDEX.md): the built-in Redis Streams scalers, or KEDA's
// external scaler client pointed at pelwarden.
type oracle struct{ bin string }

// answer is one poll's answer, as keda-oracle prints it.
type answer struct {
	MetricName string  `json:"metricName"`
	Target     float64 `json:"target"`
	Metric     float64 `json:"metric"`
	Active     bool    `json:"active"`
	Error      string  `json:"error"`
}

func (a answer) String() string {
	if a.Error != "" {
		first, _, _ := strings.Cut(a.Error, "\n")
		return "error: " + first
	}
	return fmt.Sprintf("metric %g, target %g, active %t", a.Metric, a.Target, a.Active)
}

// startOracle writes keda-oracle, gzipped in PELWARDEN_KEDA_BIN as
// ../shared/keda keeps it, to a directory of the test's. It fails, never
// skips, when the oracle is missing.
func startOracle(t *testing.T) oracle {
	t.Helper()
	dir := os.Getenv(EnvKEDABin)
	require.NotEmpty(t, dir, "%s is not set: run make test-keda KUBE_BIN=<etcd, kube-apiserver> KEDA_BIN=<keda-operator, keda-oracle.gz>", EnvKEDABin)
	bin := filepath.Join(t.TempDir(), "keda-oracle")
	if plain := filepath.Join(dir, "keda-oracle"); fileExists(plain) {
		return oracle{bin: plain}
	}
	in, err := os.Open(filepath.Join(dir, "keda-oracle.gz"))
	require.NoError(t, err, "%s=%s holds neither keda-oracle nor keda-oracle.gz", EnvKEDABin, dir)
	defer in.Close()
	zr, err := gzip.NewReader(in)
	require.NoError(t, err)
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o700)
	require.NoError(t, err)
	_, err = io.Copy(out, zr)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	return oracle{bin: bin}
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// poll runs one poll of a trigger of type typ with metadata md,
// TriggerAuthentication parameters auth and the workload's environment
// env (KEDA resolves FromEnv keys from it).
func (o oracle) poll(t *testing.T, typ string, md, auth, env map[string]string) answer {
	t.Helper()
	args := []string{"-type", typ, "-meta", jsonOf(t, md), "-auth", jsonOf(t, auth), "-env", jsonOf(t, env), "-timeout", "2s"}
	cmd := exec.CommandContext(t.Context(), o.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "keda-oracle %s: %s", strings.Join(args, " "), stderr.String())
	var a answer
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &a), stdout.String())
	return a
}

func jsonOf(t *testing.T, m map[string]string) string {
	t.Helper()
	if m == nil {
		m = map[string]string{}
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// The names every setup holds: my-stream, as KEDA's examples name it,
// with groups my-consumer-group and consumer-group-1, each with 20
// entries, 12 of them pending (w-1 holds 5, w-2 7) and a lag of 8. The
// plain server's db 1 has the stream too, with 3 pending and a lag of 4.
const (
	kedaPassword = "keda-pa55-resolved-from-env"
	kedaUser     = "keda-user"
)

var exampleGroups = []string{"my-consumer-group", "consumer-group-1"}

// grpcMTLS is the mutual TLS every pelwarden of the suite serves, as the
// first install's does: KEDA's external scaler dials it with the
// TriggerAuthentication parameters of kedaAuth. It also keeps enableTLS
// and unsafeSsl, which KEDA's external scaler reads for its connection to
// pelwarden once a trigger moved, from changing how KEDA reaches it.
type grpcMTLS struct {
	tls      config.GRPCTLS
	kedaAuth map[string]string
}

func newGRPCMTLS(t *testing.T) *grpcMTLS {
	t.Helper()
	ca := tlstest.NewCA(t, "pelwarden-grpc")
	server, keda := ca.Server(t), ca.Client(t, "keda-operator")
	dir := tlstest.NewSecretDir(t, tlstest.ServerFiles(server, ca))
	return &grpcMTLS{
		tls: config.GRPCTLS{CertFile: dir.Path(tlstest.CertKey), KeyFile: dir.Path(tlstest.KeyKey), ClientCAFile: dir.Path(tlstest.CAKey),
			ReloadInterval: time.Minute, MinVersion: "1.2"},
		kedaAuth: map[string]string{"caCert": string(ca.CertPEM), "tlsClientCert": string(keda.CertPEM), "tlsClientKey": string(keda.KeyPEM)},
	}
}

// start runs pelwarden serving g with its connection default set up by
// connect.
func (g *grpcMTLS) start(t *testing.T, connect func(*config.Redis), tune func(*config.Config)) *pelwarden {
	t.Helper()
	cfg := testConfig("")
	connect(&cfg.Redis[0])
	if tune != nil {
		tune(&cfg)
	}
	cfg.GRPC.TLS = g.tls
	ca, cert, key := []byte(g.kedaAuth["caCert"]), []byte(g.kedaAuth["tlsClientCert"]), []byte(g.kedaAuth["tlsClientKey"])
	return runPelwarden(t, cfg, kedaCreds(t, ca, cert, key))
}

// redisSetup is one Redis setup the cases run on, and the pelwarden whose
// connection default (and, on the plain server, db1) reaches it.
type redisSetup struct {
	name string
	// addrs are what KEDA's trigger names: the server, the cluster's
	// nodes, or the sentinels.
	addrs []string
	// auth holds the TriggerAuthentication parameters KEDA needs here
	// besides the credentials: TLS material.
	auth map[string]string
	pw   *pelwarden
	// master is the sentinel master's name.
	master string
}

// fill writes the example stream and its groups through rdb.
func fill(t *testing.T, rdb redis.Cmdable, entries, w1, w2 int) {
	t.Helper()
	for _, g := range exampleGroups {
		redistest.CreateGroup(t, rdb, "my-stream", g)
	}
	redistest.AddJobs(t, rdb, "my-stream", "job-", entries)
	for _, g := range exampleGroups {
		redistest.Read(t, rdb, "my-stream", g, "w-1", w1)
		redistest.Read(t, rdb, "my-stream", g, "w-2", w2)
	}
}

// kedaUsers lets KEDA's scaler in as kedaUser; pelwarden's connections
// use the default user.
var kedaUsers = []string{kedaUser + " on >" + kedaPassword + " ~* &* +@all"}

func startPlainBackend(t *testing.T, g *grpcMTLS) *redisSetup {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{Users: kedaUsers})
	fill(t, srv.Client(t), 20, 5, 7)
	db1 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 1})
	t.Cleanup(func() { _ = db1.Close() })
	fill(t, db1, 7, 1, 2)
	pw := g.start(t, func(r *config.Redis) { r.Addr = srv.Addr() }, func(c *config.Config) {
		r := c.Redis[0]
		r.Name, r.DB = "db1", 1
		c.Redis = append(c.Redis, r)
	})
	return &redisSetup{name: "plain", addrs: []string{srv.Addr()}, pw: pw}
}

func startTLSBackend(t *testing.T, g *grpcMTLS) *redisSetup {
	t.Helper()
	ca := tlstest.NewCA(t, "redis-ca")
	server, client := ca.Server(t, "127.0.0.1"), ca.Client(t, "redis-client")
	dir := tlstest.NewSecretDir(t, map[string][]byte{"server.crt": server.CertPEM, "server.key": server.KeyPEM,
		"ca.crt": ca.CertPEM, "client.crt": client.CertPEM, "client.key": client.KeyPEM})
	srv := redistest.Start(t, redistest.Options{Users: kedaUsers, TLS: &redistest.TLS{
		CertFile: dir.Path("server.crt"), KeyFile: dir.Path("server.key"), CAFile: dir.Path("ca.crt"), AuthClients: "yes",
		ClientCertFile: dir.Path("client.crt"), ClientKeyFile: dir.Path("client.key"),
	}})
	fill(t, srv.Client(t), 20, 5, 7)
	pw := g.start(t, func(r *config.Redis) {
		r.Addr = srv.Addr()
		r.TLS = config.RedisTLS{Enabled: true, CAFile: dir.Path("ca.crt"), CertFile: dir.Path("client.crt"), KeyFile: dir.Path("client.key")}
	}, nil)
	return &redisSetup{name: "tls", addrs: []string{srv.Addr()}, pw: pw,
		auth: map[string]string{"ca": string(ca.CertPEM), "cert": string(client.CertPEM), "key": string(client.KeyPEM)}}
}

func startClusterBackend(t *testing.T, g *grpcMTLS) *redisSetup {
	t.Helper()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Node: redistest.Options{Users: kedaUsers}})
	fill(t, c.Client(t), 20, 5, 7)
	pw := g.start(t, func(r *config.Redis) {
		r.Mode, r.Addr = config.RedisCluster, ""
		r.Cluster = config.RedisClusterConfig{Addrs: c.Addrs()}
	}, nil)
	return &redisSetup{name: "cluster", addrs: c.Addrs(), pw: pw}
}

func startSentinelBackend(t *testing.T, g *grpcMTLS) *redisSetup {
	t.Helper()
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MasterName: "myprimary", Node: redistest.Options{Users: kedaUsers}})
	rdb := s.Client(t)
	fill(t, rdb, 20, 5, 7)
	redistest.WaitReplicated(t, s.Master(t).Client(t))
	pw := g.start(t, func(r *config.Redis) {
		r.Mode, r.Addr = config.RedisSentinel, ""
		r.Sentinel = config.RedisSentinelConfig{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()}
	}, nil)
	return &redisSetup{name: "sentinel", addrs: s.SentinelAddrs(), pw: pw, master: s.MasterName()}
}

// ghostly holds the ghost cases' group on the plain server: live holds 4
// entries and beats every 100 ms; ghost holds 6 and beat an hour ago; 5
// more wait. It returns the pending the ghost holds.
func ghostly(t *testing.T, b *redisSetup) int64 {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: b.addrs[0]})
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.CreateGroup(t, rdb, "ghostly", "workers")
	redistest.AddJobs(t, rdb, "ghostly", "job-", 15)
	redistest.Read(t, rdb, "ghostly", "workers", "live", 4)
	redistest.Read(t, rdb, "ghostly", "workers", "ghost", 6)
	heartbeat(t, rdb, "hb:ghost", time.Now().Add(-time.Hour))
	beatEvery(t, rdb, map[string]func() string{"hb:live": func() string { return fmt.Sprint(time.Now().UnixMilli()) }})
	return 6
}
