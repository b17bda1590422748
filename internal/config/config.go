// Package config holds pelwarden's configuration: its structure, defaults,
// validation and loading from a YAML file, PELWARDEN_* environment variables
// and command-line flags.
package config

import "time"

// Config is the whole of pelwarden's configuration.
type Config struct {
	// GRPC configures the server that KEDA calls (ExternalScaler) and that
	// serves pelwarden's own diagnostics API.
	GRPC GRPC `yaml:"grpc"`
	// HTTP configures the server for /metrics, /healthz and /readyz.
	HTTP HTTP `yaml:"http"`
	// Log configures the process log.
	Log Log `yaml:"log"`
	// Scaler configures how the ExternalScaler answers KEDA.
	Scaler Scaler `yaml:"scaler"`
	// Redis lists the connections a ScaledObject may reach, by name. A
	// ScaledObject can reach no address that is not listed here.
	Redis []Redis `yaml:"redis"`
	// Hygiene configures the PEL hygiene loop.
	Hygiene Hygiene `yaml:"hygiene"`
	// Kubernetes configures the kubernetes liveness source.
	Kubernetes Kubernetes `yaml:"kubernetes"`
	// Admin configures who may call the mutating Admin RPCs.
	Admin Admin `yaml:"admin"`
	// Triggers is the policy for what KEDA trigger metadata may ask for.
	Triggers Triggers `yaml:"triggers"`
}

// Kubernetes configures access to the Kubernetes API, which the kubernetes
// liveness source watches pods through.
type Kubernetes struct {
	// Enabled lets triggers use `liveness: kubernetes`. Default false: a
	// pelwarden outside a cluster needs no API. With it, pelwarden uses the
	// in-cluster service account, or Kubeconfig when set.
	Enabled bool `yaml:"enabled"`
	// Kubeconfig is the path of a kubeconfig file, for running outside a
	// cluster. Optional; requires Enabled; the file must be readable.
	Kubeconfig string `yaml:"kubeconfig"`
	// MaxPodWatches bounds the pod watches (one per pod namespace and
	// label selector, shared by every trigger that names them) running at
	// once. Past it, a trigger that would start one more gets
	// ResourceExhausted. Each is a list and a watch on the API server and
	// a cache of the pods it selects. Default 100; at least 1.
	MaxPodWatches int `yaml:"maxPodWatches"`
	// MaxPodWatchesPerNamespace bounds the pod watches the triggers of one
	// ScaledObject namespace may start, so one namespace cannot take
	// every watch. Default 20; from 1 to maxPodWatches.
	MaxPodWatchesPerNamespace int `yaml:"maxPodWatchesPerNamespace"`
	// APIQPS and APIBurst are the Kubernetes client's rate limit, in
	// requests per second and at once: every pod watch starts with a list
	// and a watch, and a failing one lists again about every 2.5 s, so a
	// new watch is current within a second only when the limit can take
	// maxPodWatches' lists at once. client-go's default (5, 10) made a new
	// watch wait its turn behind hundreds of others. Defaults 50 and 200;
	// at least 1 each.
	APIQPS   int `yaml:"apiQPS"`
	APIBurst int `yaml:"apiBurst"`
}

// Hygiene configures the loop that gives ghost-held entries back.
type Hygiene struct {
	// ScanInterval is how often each hygiene target is scanned; a consumer
	// that turns Ghost while holding entries triggers a scan at once.
	// Default 10s.
	ScanInterval time.Duration `yaml:"scanInterval"`
	// LeaseTTL is how long one replica's scan lease lasts unrenewed; it
	// must be longer than scanInterval. Default 30s. Correctness never
	// depends on the lease: every action is guarded in Redis.
	LeaseTTL time.Duration `yaml:"leaseTTL"`
	// BatchSize is the entries per XPENDING page and per guarded script
	// call, 1-10000. Default 1000.
	BatchSize int `yaml:"batchSize"`
	// Workers bounds the hygiene scans running at once, 1-256; targets
	// wait their turn in a queue ordered by when each is due. Default 4.
	Workers int `yaml:"workers"`
	// MaxTargets bounds the groups that ScaledObject metadata may enroll
	// for hygiene; past it a request asking for reclaim on a new group
	// gets ResourceExhausted. Targets listed here under targets are always
	// accepted. At least 1; default 1000.
	MaxTargets int `yaml:"maxTargets"`
	// Identity names this replica in the lease, the same across its
	// restarts; empty means the host name (the pod's name in Kubernetes).
	// A replica restarted under its identity takes back at once the leases
	// its earlier run left; another replica waits out leaseTTL.
	Identity string `yaml:"identity"`
	// Targets are groups looked after whether or not a ScaledObject names
	// them. Each is a map of the trigger metadata keys (stream,
	// consumerGroup, reclaim, entryStaleSeconds, liveness, ...); reclaim
	// must be requeue or claim.
	Targets []map[string]string `yaml:"targets"`
}

// GRPC configures the gRPC server.
type GRPC struct {
	// Addr is the listen address, host:port. Default ":9090", the port KEDA
	// external scalers conventionally use.
	Addr string `yaml:"addr"`
	// ShutdownTimeout bounds graceful shutdown: the server tries GracefulStop
	// and falls back to Stop after this long, because KEDA holds
	// StreamIsActive streams open forever. Default 10s; must be positive.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout"`
	// TLS serves the whole gRPC port (ExternalScaler, health, reflection and
	// the diagnostics API) over TLS, or mutual TLS. Off by default.
	TLS GRPCTLS `yaml:"tls"`
	// MaxRecvMsgBytes bounds one request message on the gRPC port; a larger
	// one is refused with ResourceExhausted before it is decoded. Default
	// 1048576 (1 MiB): the largest request pelwarden takes, a Reclaim of
	// 10,000 named entries, is about 430 KB, and a KEDA request at the
	// trigger metadata bounds about 20 KB. From 65536 to 67108864.
	MaxRecvMsgBytes int `yaml:"maxRecvMsgBytes"`
	// RefusedCallsPerSecond is how many refused calls (bad input, no
	// permission, a cap, an unknown target) all callers may have a second,
	// a namespace a quarter of it and one caller (a trigger, or the peer
	// of a call naming none) a fortieth, each with five seconds' worth at
	// once; a refused call weighs one more per 64 KiB of its request. A
	// caller past its share has its refused answers held, each in its own
	// goroutine; a new caller of a namespace past its share, or while all
	// are past theirs, waits before it is read on, unless pelwarden
	// serves its trigger. No connection is ever held: KEDA sends every
	// ScaledObject's calls over one. A failing Redis refuses nothing.
	// Default 200: a broken ScaledObject polled every second stays below
	// its share. 0 turns it off.
	RefusedCallsPerSecond int `yaml:"refusedCallsPerSecond"`
}

// Bounds of grpc.maxRecvMsgBytes.
const (
	DefaultMaxRecvMsgBytes = 1 << 20
	minRecvMsgBytes        = 64 << 10
	maxRecvMsgBytes        = 64 << 20
)

// GRPCTLS configures TLS on the gRPC port. TLS is on when certFile and
// keyFile are set; the port then refuses plaintext. The files are polled
// and a changed pair or client CA is served to new connections without a
// restart, as when cert-manager rotates a mounted Secret.
type GRPCTLS struct {
	// CertFile is the PEM server certificate, with any intermediates after
	// it. Set together with KeyFile or not at all; it must be readable and
	// match KeyFile. KEDA checks its SANs against the host of scalerAddress.
	CertFile string `yaml:"certFile"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"keyFile"`
	// ClientCAFile is a PEM bundle of CAs that verify client certificates.
	// When set, every client must present a certificate they signed (mutual
	// TLS); it requires certFile and keyFile. Empty means no client
	// certificate is asked for.
	ClientCAFile string `yaml:"clientCAFile"`
	// ReloadInterval is how often the files are read and compared with what
	// is served. Default 10s; must be positive. A Secret update reaches a
	// pod's mount within about a minute, so seconds are plenty.
	ReloadInterval time.Duration `yaml:"reloadInterval"`
	// MinVersion is the lowest TLS version accepted: "1.2" or "1.3".
	// Default "1.2", which is also the minimum KEDA's client uses unless
	// KEDA_HTTP_MIN_TLS_VERSION says otherwise.
	MinVersion string `yaml:"minVersion"`
}

// Enabled reports whether the gRPC port serves TLS.
func (t GRPCTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// Mutual reports whether clients must present a certificate.
func (t GRPCTLS) Mutual() bool { return t.ClientCAFile != "" }

// HTTP configures the HTTP server.
type HTTP struct {
	// Addr is the listen address, host:port, of /metrics, /healthz and
	// /readyz. Default ":8080"; must differ from grpc.addr. It is plain
	// HTTP even when grpc.tls is set, so kubelet probes and Prometheus need
	// no client certificate; keep it off networks that must not see it.
	Addr string `yaml:"addr"`
	// Pprof serves Go's runtime profiles under /debug/pprof/ on this port,
	// to find where memory or CPU goes in a running process. Default false:
	// a profile names streams and groups, and taking one costs CPU.
	Pprof bool `yaml:"pprof"`
}

// Log configures logging.
type Log struct {
	// Level is the lowest level logged: debug, info, warn or error.
	// Default info.
	Level string `yaml:"level"`
	// Format is json (one object a line, for log collectors) or text.
	// Default json.
	Format string `yaml:"format"`
}

// Scaler configures the KEDA ExternalScaler.
type Scaler struct {
	// Freshness is the oldest read of a group that GetMetrics and IsActive
	// answer from, counted from when the read began. A group is read when
	// its polls need it: just ahead of each poll pelwarden expects from the
	// rhythm of the target's polls, batched with the other reads due then,
	// so a poll is answered at once; a poll that finds no read this fresh
	// waits for one. A target nobody polls costs Redis only the reads at
	// its verdicts' deadlines. Default 1s: an answer at most a second
	// behind Redis, where KEDA polls every 30s by default; must be
	// positive.
	Freshness time.Duration `yaml:"freshness"`
	// RequestTimeout is pelwarden's own deadline for an RPC that must reach
	// Redis; KEDA sets none. Default 3s; must be positive.
	RequestTimeout time.Duration `yaml:"requestTimeout"`
	// TargetIdleExpiry drops a target that no RPC has asked about for this
	// long, so deleted ScaledObjects stop costing Redis round trips.
	// Default 10m; must be positive.
	TargetIdleExpiry time.Duration `yaml:"targetIdleExpiry"`
	// ActiveResendInterval is how often StreamIsActive re-sends its answer,
	// so a KEDA that missed one converges. Default 5s; must be positive.
	ActiveResendInterval time.Duration `yaml:"activeResendInterval"`
	// MaxTargets bounds the number of registered targets, and with it the
	// memory and Redis load that ScaledObjects can cause. Default 10000;
	// must be at least 1.
	MaxTargets int `yaml:"maxTargets"`
	// MaxMetricsTargets bounds the targets of triggers whose per-target
	// series (16 each) /metrics shows, so a scrape stays small however
	// many targets ScaledObjects name: their namespaces share it in turn
	// (a namespace with fewer targets shows all of them and leaves the
	// rest to the others); hygiene.targets are always shown, and
	// pelwarden_metrics_targets_hidden counts the rest. The failing
	// targets' pelwarden_read_failing series are capped the same way, apart
	// (in an outage every target fails). Default 1000:
	// about 16,000 series, some 2 MB a scrape in text. 0 shows none; at
	// least maxTargets shows every target.
	MaxMetricsTargets int `yaml:"maxMetricsTargets"`
	// LagEstimateCap is the most entries counted to estimate lag when
	// XINFO GROUPS reports it as NULL (after deletions). Default 10000; must
	// be at least 1.
	LagEstimateCap int64 `yaml:"lagEstimateCap"`
	// MaxActiveStreams bounds the StreamIsActive streams (KEDA's
	// external-push triggers) open at once; one more is ResourceExhausted.
	// Each holds a goroutine and a subscription; the streams on one Redis
	// stream share one armed watch. Default 1000; at least 1.
	MaxActiveStreams int `yaml:"maxActiveStreams"`
	// MaxActiveStreamsPerNamespace bounds the StreamIsActive streams of
	// one ScaledObject namespace, so one namespace cannot take every
	// stream. Default 200; from 1 to maxActiveStreams.
	MaxActiveStreamsPerNamespace int `yaml:"maxActiveStreamsPerNamespace"`
	// MaxActiveTargetsPerGroup bounds the targets (liveness settings) of
	// one group that have a StreamIsActive stream open: streams of one
	// target share their evaluation, but each target's is its own, and an
	// entry on the stream wakes them all. Default 16; from 1 to
	// maxActiveStreams.
	MaxActiveTargetsPerGroup int `yaml:"maxActiveTargetsPerGroup"`
	// BreakerPercent is the disruption breaker's share, in percent: when
	// at least this share of a group's consumers that were Alive within
	// one threshold of their evidence turn Ghost together on that evidence
	// alone (not on a pod seen to go), they are held Unknown as a fault of
	// the evidence. Default 55, kube-controller-manager's
	// --unhealthy-zone-threshold; 1-100.
	BreakerPercent int `yaml:"breakerPercent"`
	// BreakerMinConsumers is the fewest consumers that must turn Ghost
	// together to trip the breaker. Default 3 (the node lifecycle
	// controller's "more than 2"); at least 1. Set it above any group's
	// size to turn the breaker off.
	BreakerMinConsumers int `yaml:"breakerMinConsumers"`
}

// Redis is one named Redis connection.
type Redis struct {
	// Name identifies the connection in ScaledObject metadata (key `redis`).
	// Required and unique; lowercase letters, digits and '-', starting and
	// ending with a letter or digit, at most 63 characters.
	Name string `yaml:"name"`
	// Mode is how the connection reaches Redis: standalone (Addr),
	// sentinel (the Sentinel block) or cluster (the Cluster block).
	// Default standalone.
	Mode RedisMode `yaml:"mode"`
	// Addr is host:port of the Redis server in mode standalone, where it is
	// required; the port is numeric, 1-65535. Other modes take their
	// addresses from their own block and refuse Addr.
	Addr string `yaml:"addr"`
	// Sentinel configures mode sentinel; its options are refused in other
	// modes.
	Sentinel RedisSentinelConfig `yaml:"sentinel"`
	// Cluster configures mode cluster; its options are refused in other
	// modes.
	Cluster RedisClusterConfig `yaml:"cluster"`
	// Username is the ACL user, on every node in modes sentinel and
	// cluster. Optional; empty means the default user.
	Username string `yaml:"username"`
	// Password is resolved at load time from PasswordEnv or PasswordFile.
	// It is never read from YAML text, so a config file can be shared.
	Password string `yaml:"-"`
	// PasswordEnv names an environment variable that holds the password.
	// Mutually exclusive with PasswordFile.
	PasswordEnv string `yaml:"passwordEnv"`
	// PasswordFile is the path of a file that holds the password, such as a
	// mounted Kubernetes Secret; trailing newlines are trimmed. Mutually
	// exclusive with PasswordEnv.
	PasswordFile string `yaml:"passwordFile"`
	// DB is the logical database number. Default 0; must not be negative.
	DB int `yaml:"db"`
	// TLS configures TLS to the server.
	TLS RedisTLS `yaml:"tls"`
	// DialTimeout bounds establishing a connection. Default 2s; must be
	// positive.
	DialTimeout time.Duration `yaml:"dialTimeout"`
	// ReadTimeout bounds reading one reply. Default 2s; must be positive.
	ReadTimeout time.Duration `yaml:"readTimeout"`
	// WriteTimeout bounds writing one command. Default 2s; must be positive.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// PoolSize is the most connections kept to this server. Default 20;
	// must be at least 1.
	PoolSize int `yaml:"poolSize"`

	// Durability of hygiene's writes (kept apart from the connection's
	// mode and addresses).

	// WaitReplicas, above 0, makes hygiene send WAIT after each guarded
	// script call on this connection and stop its scan when fewer replicas
	// than this acknowledged the writes, so a failover to a replica that
	// had not seen them is reported, not silent. Default 0 (off); must not
	// be negative.
	WaitReplicas int `yaml:"waitReplicas"`
	// WaitTimeout bounds each WAIT. Default 1s; must be positive.
	WaitTimeout time.Duration `yaml:"waitTimeout"`

	// IdleBefore72 is how idle alone judges a consumer that holds entries
	// on a server before Redis 7.2, whose idle counts only reads that
	// delivered entries: a worker polling an empty stream while it works
	// on what it holds looks dead there. IdleUnknown (the default) judges
	// it Unknown: counted as live, never reclaimed. IdleGhost judges it by
	// idle as on 7.2: right only where workers never read while they hold
	// entries (one job at a time, acknowledged before the next read).
	IdleBefore72 IdleBefore72 `yaml:"idleBefore72"`
}

// IdleBefore72 is redis[].idleBefore72.
type IdleBefore72 string

// The values of redis[].idleBefore72.
const (
	IdleUnknown IdleBefore72 = "unknown"
	IdleGhost   IdleBefore72 = "ghost"
)

// RedisTLS configures TLS for one Redis connection, to every node and, in
// mode sentinel, to the sentinels too. Every field other than
// Enabled requires Enabled, so a half-written TLS block fails loudly instead
// of silently connecting in plain text.
type RedisTLS struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of CAs that verify the server; empty means the
	// system roots. The file must be readable.
	CAFile string `yaml:"caFile"`
	// CertFile is the PEM client certificate for mutual TLS; set together
	// with KeyFile or not at all. The file must be readable.
	CertFile string `yaml:"certFile"`
	// KeyFile is the PEM private key of CertFile; set together with
	// CertFile or not at all. The file must be readable.
	KeyFile string `yaml:"keyFile"`
	// ServerName overrides the name verified in the server certificate;
	// empty means the host of Addr.
	ServerName string `yaml:"serverName"`
	// InsecureSkipVerify skips verifying the server certificate. For tests
	// only: it allows a man in the middle.
	InsecureSkipVerify bool `yaml:"insecureSkipVerify"`
}

// Default returns the configuration used where nothing else is set. It has no
// Redis connection: one must be configured, for example with --redis-addr.
func Default() Config {
	return Config{
		GRPC: GRPC{
			Addr:            ":9090",
			ShutdownTimeout: 10 * time.Second,
			TLS:             GRPCTLS{ReloadInterval: 10 * time.Second, MinVersion: "1.2"},
			MaxRecvMsgBytes: DefaultMaxRecvMsgBytes,

			RefusedCallsPerSecond: 200,
		},
		HTTP: HTTP{Addr: ":8080"},
		Log:  Log{Level: "info", Format: "json"},
		Hygiene: Hygiene{
			ScanInterval: 10 * time.Second,
			LeaseTTL:     30 * time.Second,
			BatchSize:    1000,
			Workers:      4,
			MaxTargets:   1000,
		},
		Scaler: Scaler{
			Freshness:            time.Second,
			RequestTimeout:       3 * time.Second,
			TargetIdleExpiry:     10 * time.Minute,
			ActiveResendInterval: 5 * time.Second,
			MaxTargets:           10000,
			MaxMetricsTargets:    1000,
			LagEstimateCap:       10000,

			MaxActiveStreams:             1000,
			MaxActiveStreamsPerNamespace: 200,
			MaxActiveTargetsPerGroup:     16,
			BreakerPercent:               55,
			BreakerMinConsumers:          3,
		},
		Kubernetes: Kubernetes{MaxPodWatches: 100, MaxPodWatchesPerNamespace: 20, APIQPS: 50, APIBurst: 200},
		Triggers:   defaultTriggers(),
	}
}

// DefaultRedis returns a connection with the given name and address and
// default values for everything else.
func DefaultRedis(name, addr string) Redis {
	return Redis{
		Name:         name,
		Mode:         RedisStandalone,
		Addr:         addr,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		PoolSize:     20,
		WaitTimeout:  time.Second,
		IdleBefore72: IdleUnknown,
	}
}
