package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// valid returns the defaults plus the one connection they lack.
func valid() config.Config {
	c := config.Default()
	c.Redis = []config.Redis{config.DefaultRedis("default", "127.0.0.1:6379")}
	return c
}

func TestDefaultsWithOneConnectionValidate(t *testing.T) {
	t.Parallel()
	c := valid()
	require.NoError(t, c.Validate())
}

func TestDefaultsAloneAskForARedisConnection(t *testing.T) {
	t.Parallel()
	c := config.Default()
	err := c.Validate()
	require.ErrorContains(t, err, "redis: at least one connection is required")
	require.ErrorContains(t, err, "--redis-addr")
}

// writeFile creates a file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestValidateRejectsEachBadFieldByName(t *testing.T) {
	t.Parallel()
	ca := writeFile(t, "ca.pem", "ca")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	dir := t.TempDir()

	tests := map[string]struct {
		mutate func(c *config.Config)
		want   string // substring of the error: the field and what it accepts
	}{
		"empty grpc addr":          {func(c *config.Config) { c.GRPC.Addr = "" }, `grpc.addr: must be host:port with a numeric port 0-65535, such as ":9090", got ""`},
		"grpc addr without port":   {func(c *config.Config) { c.GRPC.Addr = "localhost" }, `grpc.addr: must be host:port`},
		"grpc port out of range":   {func(c *config.Config) { c.GRPC.Addr = ":65536" }, `grpc.addr: must be host:port`},
		"zero shutdown timeout":    {func(c *config.Config) { c.GRPC.ShutdownTimeout = 0 }, `grpc.shutdownTimeout: must be a positive duration such as 10s, got "0s"`},
		"tiny grpc receive size":   {func(c *config.Config) { c.GRPC.MaxRecvMsgBytes = 1000 }, `grpc.maxRecvMsgBytes: must be bytes from 65536 to 67108864 (default 1048576), got 1000`},
		"negative metrics targets": {func(c *config.Config) { c.Scaler.MaxMetricsTargets = -1 }, `scaler.maxMetricsTargets: must be a count of targets, 0 for none (default 1000), got -1`},
		"huge grpc receive size":   {func(c *config.Config) { c.GRPC.MaxRecvMsgBytes = 1 << 30 }, `grpc.maxRecvMsgBytes: must be bytes from 65536 to 67108864`},
		"negative refused calls":   {func(c *config.Config) { c.GRPC.RefusedCallsPerSecond = -1 }, `grpc.refusedCallsPerSecond: must be a count of calls a second, 0 for no limit (default 200), got -1`},
		"named http port":          {func(c *config.Config) { c.HTTP.Addr = ":http" }, `http.addr: must be host:port with a numeric port 0-65535, such as ":8080", got ":http"`},
		"http on the grpc port":    {func(c *config.Config) { c.HTTP.Addr = "0.0.0.0:9090" }, `http.addr: must differ from grpc.addr`},
		"unknown log level":        {func(c *config.Config) { c.Log.Level = "trace" }, `log.level: must be one of debug, info, warn, error, got "trace"`},
		"unknown log format":       {func(c *config.Config) { c.Log.Format = "logfmt" }, `log.format: must be one of json, text, got "logfmt"`},
		"lease not past the scan":  {func(c *config.Config) { c.Hygiene.LeaseTTL = c.Hygiene.ScanInterval }, `hygiene.leaseTTL: must be longer than hygiene.scanInterval`},
		"batch of zero":            {func(c *config.Config) { c.Hygiene.BatchSize = 0 }, `hygiene.batchSize: must be a whole number from 1 to 10000, got 0`},
		"no hygiene workers":       {func(c *config.Config) { c.Hygiene.Workers = 0 }, `hygiene.workers: must be a whole number from 1 to 256, got 0`},
		"too many workers":         {func(c *config.Config) { c.Hygiene.Workers = 257 }, `hygiene.workers: must be a whole number from 1 to 256, got 257`},
		"zero hygiene targets":     {func(c *config.Config) { c.Hygiene.MaxTargets = 0 }, `hygiene.maxTargets: must be an integer >= 1, got 0`},
		"hygiene target without mode": {func(c *config.Config) {
			c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g"}}
		}, `hygiene.targets[0].reclaim: must be requeue, claim or release for a hygiene target`},
		"hygiene target releasing where nothing claims": {func(c *config.Config) {
			c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g", "reclaim": "release"}}
		}, `hygiene.targets[0].reclaim: may be release only with claimingReaders: true`},
		"hygiene target bad key": {func(c *config.Config) {
			c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g", "reclaim": "requeue", "maxDeliveries": "x"}}
		}, `hygiene.targets[0].maxDeliveries: must be a whole number >= 0`},
		"hygiene target unknown redis": {func(c *config.Config) {
			c.Hygiene.Targets = []map[string]string{{"redis": "other", "stream": "s", "consumerGroup": "g", "reclaim": "requeue"}}
		}, `hygiene.targets[0].redis: must name a configured Redis connection (default)`},
		"zero freshness":           {func(c *config.Config) { c.Scaler.Freshness = 0 }, `scaler.freshness: must be a positive duration such as 1s, got "0s"`},
		"negative freshness":       {func(c *config.Config) { c.Scaler.Freshness = -time.Second }, `scaler.freshness: must be a positive duration such as 1s, got "-1s"`},
		"zero request timeout":     {func(c *config.Config) { c.Scaler.RequestTimeout = 0 }, `scaler.requestTimeout: must be a positive duration`},
		"zero target idle expiry":  {func(c *config.Config) { c.Scaler.TargetIdleExpiry = 0 }, `scaler.targetIdleExpiry: must be a positive duration`},
		"zero resend interval":     {func(c *config.Config) { c.Scaler.ActiveResendInterval = 0 }, `scaler.activeResendInterval: must be a positive duration`},
		"zero max targets":         {func(c *config.Config) { c.Scaler.MaxTargets = 0 }, `scaler.maxTargets: must be an integer >= 1, got 0`},
		"zero lag estimate cap":    {func(c *config.Config) { c.Scaler.LagEstimateCap = 0 }, `scaler.lagEstimateCap: must be an integer >= 1, got 0`},
		"breaker percent past 100": {func(c *config.Config) { c.Scaler.BreakerPercent = 101 }, `scaler.breakerPercent: must be a percentage from 1 to 100, such as 55, got 101`},
		"breaker percent 0":        {func(c *config.Config) { c.Scaler.BreakerPercent = 0 }, `scaler.breakerPercent: must be a percentage from 1 to 100, such as 55, got 0`},
		"breaker of no consumers":  {func(c *config.Config) { c.Scaler.BreakerMinConsumers = 0 }, `scaler.breakerMinConsumers: must be an integer >= 1, got 0`},
		"no connections":           {func(c *config.Config) { c.Redis = nil }, `redis: at least one connection is required`},
		"empty name":               {func(c *config.Config) { c.Redis[0].Name = "" }, `redis[0].name: must be 1-63 lowercase letters, digits or '-'`},
		"uppercase name":           {func(c *config.Config) { c.Redis[0].Name = "Orders" }, `redis[0].name: must be 1-63 lowercase letters`},
		"name ending in a dash":    {func(c *config.Config) { c.Redis[0].Name = "orders-" }, `redis[0].name: must be 1-63`},
		"name of 64 characters": {func(c *config.Config) {
			c.Redis[0].Name = "a123456789012345678901234567890123456789012345678901234567890123"
		}, `redis[0].name: must be 1-63`},
		"duplicate name": {func(c *config.Config) {
			c.Redis = append(c.Redis, config.DefaultRedis("default", "other:6379"))
		}, `redis[1].name: must be unique, "default" is also redis[0].name`},
		"default connection without addr": {func(c *config.Config) { c.Redis[0].Addr = "" }, `redis[0].addr: is required in mode standalone; for the connection named default set --redis-addr or PELWARDEN_REDIS_ADDR`},
		"addr without port": {func(c *config.Config) {
			c.Redis = append(c.Redis, config.DefaultRedis("orders", "orders"))
		}, `redis[1].addr: must be host:port with a host and a numeric port 1-65535, such as "redis:6379", got "orders"`},
		"addr with port 0":        {func(c *config.Config) { c.Redis[0].Addr = "redis:0" }, `redis[0].addr: must be host:port with a host and a numeric port 1-65535`},
		"addr with named port":    {func(c *config.Config) { c.Redis[0].Addr = "redis:redis" }, `redis[0].addr: must be host:port`},
		"addr without host":       {func(c *config.Config) { c.Redis[0].Addr = ":6379" }, `redis[0].addr: must be host:port with a host`},
		"both password sources":   {func(c *config.Config) { c.Redis[0].PasswordEnv, c.Redis[0].PasswordFile = "PW", "/pw" }, `redis[0].passwordEnv: is mutually exclusive with passwordFile`},
		"negative db":             {func(c *config.Config) { c.Redis[0].DB = -1 }, `redis[0].db: must be an integer >= 0, got -1`},
		"zero dial timeout":       {func(c *config.Config) { c.Redis[0].DialTimeout = 0 }, `redis[0].dialTimeout: must be a positive duration such as 2s`},
		"zero read timeout":       {func(c *config.Config) { c.Redis[0].ReadTimeout = 0 }, `redis[0].readTimeout: must be a positive duration`},
		"zero write timeout":      {func(c *config.Config) { c.Redis[0].WriteTimeout = 0 }, `redis[0].writeTimeout: must be a positive duration`},
		"zero pool size":          {func(c *config.Config) { c.Redis[0].PoolSize = 0 }, `redis[0].poolSize: must be an integer >= 1, got 0`},
		"negative wait replicas":  {func(c *config.Config) { c.Redis[0].WaitReplicas = -1 }, `redis[0].waitReplicas: must be an integer >= 0 (0 turns WAIT off), got -1`},
		"zero wait timeout":       {func(c *config.Config) { c.Redis[0].WaitTimeout = 0 }, `redis[0].waitTimeout: must be a positive duration such as 1s`},
		"unknown idleBefore72":    {func(c *config.Config) { c.Redis[0].IdleBefore72 = "alive" }, `redis[0].idleBefore72: must be unknown or ghost, got "alive"`},
		"ca file without tls":     {func(c *config.Config) { c.Redis[0].TLS.CAFile = ca }, `redis[0].tls.caFile: requires redis[0].tls.enabled: true`},
		"cert file without tls":   {func(c *config.Config) { c.Redis[0].TLS.CertFile, c.Redis[0].TLS.KeyFile = ca, ca }, `redis[0].tls.certFile: requires redis[0].tls.enabled: true`},
		"key file without tls":    {func(c *config.Config) { c.Redis[0].TLS.CertFile, c.Redis[0].TLS.KeyFile = ca, ca }, `redis[0].tls.keyFile: requires redis[0].tls.enabled: true`},
		"server name without tls": {func(c *config.Config) { c.Redis[0].TLS.ServerName = "redis" }, `redis[0].tls.serverName: requires redis[0].tls.enabled: true`},
		"skip verify without tls": {func(c *config.Config) { c.Redis[0].TLS.InsecureSkipVerify = true }, `redis[0].tls.insecureSkipVerify: requires redis[0].tls.enabled: true`},
		"cert without key":        {func(c *config.Config) { c.Redis[0].TLS.Enabled, c.Redis[0].TLS.CertFile = true, ca }, `redis[0].tls.certFile: must be set together with keyFile, or neither`},
		"key without cert":        {func(c *config.Config) { c.Redis[0].TLS.Enabled, c.Redis[0].TLS.KeyFile = true, ca }, `redis[0].tls.certFile: must be set together with keyFile`},
		"missing ca file":         {func(c *config.Config) { c.Redis[0].TLS.Enabled, c.Redis[0].TLS.CAFile = true, missing }, `redis[0].tls.caFile: must name a readable file: "` + missing + `": no such file or directory`},
		"ca file that is a dir":   {func(c *config.Config) { c.Redis[0].TLS.Enabled, c.Redis[0].TLS.CAFile = true, dir }, `redis[0].tls.caFile: must name a readable file, "` + dir + `" is a directory`},
		"missing client cert file": {func(c *config.Config) {
			c.Redis[0].TLS.Enabled, c.Redis[0].TLS.CertFile, c.Redis[0].TLS.KeyFile = true, missing, ca
		}, `redis[0].tls.certFile: must name a readable file`},
		"kubeconfig without kubernetes": {func(c *config.Config) { c.Kubernetes.Kubeconfig = ca }, `kubernetes.kubeconfig: requires kubernetes.enabled: true`},
		"missing kubeconfig": {func(c *config.Config) {
			c.Kubernetes.Enabled, c.Kubernetes.Kubeconfig = true, missing
		}, `kubernetes.kubeconfig: must name a readable file`},
		"kubernetes target while the API is not watched": {func(c *config.Config) {
			c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g", "reclaim": "requeue", "liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs"}}
		}, `hygiene.targets[0].liveness: kubernetes needs kubernetes.enabled`},
		"kubernetes target without a namespace": {func(c *config.Config) {
			c.Kubernetes.Enabled = true
			c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g", "reclaim": "requeue", "liveness": "kubernetes", "podSelector": "app=w"}}
		}, `hygiene.targets[0].podNamespace: must be a namespace name`},
		"no active streams":               {func(c *config.Config) { c.Scaler.MaxActiveStreams = 0 }, `scaler.maxActiveStreams: must be an integer >= 1, got 0`},
		"no active streams per namespace": {func(c *config.Config) { c.Scaler.MaxActiveStreamsPerNamespace = 0 }, `scaler.maxActiveStreamsPerNamespace: must be an integer >= 1, got 0`},
		"no active targets per group":     {func(c *config.Config) { c.Scaler.MaxActiveTargetsPerGroup = 0 }, `scaler.maxActiveTargetsPerGroup: must be an integer >= 1, got 0`},
		"namespace streams above the cap": {func(c *config.Config) {
			c.Scaler.MaxActiveStreams, c.Scaler.MaxActiveStreamsPerNamespace = 10, 11
		}, `scaler.maxActiveStreamsPerNamespace: must be at most scaler.maxActiveStreams (10), got 11`},
		"no pod watches": {func(c *config.Config) { c.Kubernetes.MaxPodWatches = 0 }, `kubernetes.maxPodWatches: must be an integer >= 1, got 0`},
		"namespace pod watches above the cap": {func(c *config.Config) {
			c.Kubernetes.MaxPodWatches, c.Kubernetes.MaxPodWatchesPerNamespace = 5, 6
		}, `kubernetes.maxPodWatchesPerNamespace: must be at most kubernetes.maxPodWatches (5), got 6`},
		"no api qps":   {func(c *config.Config) { c.Kubernetes.APIQPS = 0 }, `kubernetes.apiQPS: must be an integer >= 1, got 0`},
		"no api burst": {func(c *config.Config) { c.Kubernetes.APIBurst = -1 }, `kubernetes.apiBurst: must be an integer >= 1, got -1`},
		"missing client key file": {func(c *config.Config) {
			c.Redis[0].TLS.Enabled, c.Redis[0].TLS.CertFile, c.Redis[0].TLS.KeyFile = true, ca, missing
		}, `redis[0].tls.keyFile: must name a readable file`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			require.ErrorContains(t, err, tt.want)
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr, "Validate should return a *config.Error")
		})
	}
}

func TestValidateAcceptsEnabledTLSWithReadableFiles(t *testing.T) {
	t.Parallel()
	c := valid()
	c.Redis[0].TLS = config.RedisTLS{
		Enabled:    true,
		CAFile:     writeFile(t, "ca.pem", "ca"),
		CertFile:   writeFile(t, "cert.pem", "cert"),
		KeyFile:    writeFile(t, "key.pem", "key"),
		ServerName: "redis.internal",
	}
	require.NoError(t, c.Validate())
}

func TestValidateAcceptsPortZeroForBothListeners(t *testing.T) {
	t.Parallel()
	c := valid()
	c.GRPC.Addr, c.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	require.NoError(t, c.Validate(), "port 0 picks a free port for each listener, so they cannot collide")
}

func TestValidateReportsEveryProblemAsAFieldError(t *testing.T) {
	t.Parallel()
	c := valid()
	c.Log.Level = "loud"
	c.Scaler.MaxTargets = 0
	c.Redis[0].PoolSize = 0

	err := c.Validate()
	var cfgErr *config.Error
	require.ErrorAs(t, err, &cfgErr)
	fields := make([]string, 0, len(cfgErr.Problems))
	for _, p := range cfgErr.Problems {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{"log.level", "scaler.maxTargets", "redis[0].poolSize"}, fields)

	var fieldErr *config.FieldError
	require.ErrorAs(t, err, &fieldErr, "errors.As should reach a *config.FieldError")
	require.Equal(t, "log.level", fieldErr.Field)
}

func TestTriggerPolicyProblemsNameTheFieldAndWhatIsAccepted(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		tune    func(*config.Triggers)
		field   string
		mention string
	}{
		"claim from triggers":      {tune: func(p *config.Triggers) { p.Reclaim = "claim" }, field: "triggers.reclaim", mention: "off or requeue"},
		"requeue with no streams":  {tune: func(p *config.Triggers) { p.Reclaim = "requeue" }, field: "triggers.reclaim", mention: "hygieneStreams"},
		"a zero floor":             {tune: func(p *config.Triggers) { p.Floors.EntryStale = 0 }, field: "triggers.floors.entryStale", mention: "positive duration"},
		"a floor over a year":      {tune: func(p *config.Triggers) { p.Floors.GhostIdle = 400 * 24 * time.Hour }, field: "triggers.floors.ghostIdle", mention: "at most"},
		"no scaler targets":        {tune: func(p *config.Triggers) { p.Quotas.ScalerTargets = 0 }, field: "triggers.quotas.scalerTargets", mention: ">= 1"},
		"no hygiene targets":       {tune: func(p *config.Triggers) { p.Quotas.HygieneTargets = -1 }, field: "triggers.quotas.hygieneTargets", mention: ">= 1"},
		"a rule without namespace": {tune: func(p *config.Triggers) { p.Rules[0].Namespaces = nil }, field: "triggers.rules[0].namespaces", mention: "at least one"},
		"a bad namespace glob":     {tune: func(p *config.Triggers) { p.Rules[0].Namespaces = []string{"team-[a"} }, field: "triggers.rules[0].namespaces[0]", mention: "path.Match"},
		"an empty stream glob":     {tune: func(p *config.Triggers) { p.Rules[0].HygieneStreams = []string{""} }, field: "triggers.rules[0].hygieneStreams[0]", mention: "path.Match"},
		"an unknown connection":    {tune: func(p *config.Triggers) { p.Rules[0].Redis = []string{"orders"} }, field: "triggers.rules[0].redis[0]", mention: "no connection"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tc.tune(&c.Triggers)
			err := c.Validate()
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			var found bool
			for _, p := range cfgErr.Problems {
				if p.Field == tc.field {
					found = true
					require.Contains(t, p.Problem, tc.mention)
				}
			}
			require.True(t, found, "no problem named %s in %v", tc.field, err)
		})
	}
}

func TestTriggerPolicyDefaultsLetTriggersReadMetricsOnly(t *testing.T) {
	t.Parallel()
	p := config.Default().Triggers
	require.Equal(t, policy.ReclaimOff, p.Reclaim, "a fresh install takes no hygiene request from a trigger")
	require.Equal(t, []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}}}, p.Rules, "metrics from every connection, and no key a trigger names is read")
	require.Empty(t, p.Profiles)
	require.Equal(t, config.TriggerFloors{EntryStale: 30 * time.Second, GhostIdle: time.Minute, HeartbeatMaxAge: 10 * time.Second,
		PodDeletionGrace: 2 * time.Second, MaxDeliveries: 3}, p.Floors)
	require.Equal(t, time.Minute, p.WarmUp, "longer than KEDA's default pollingInterval of 30s")
	c := valid()
	c.Triggers.Reclaim = policy.ReclaimRequeue
	c.Triggers.Rules = append(c.Triggers.Rules, config.TriggerRule{Namespaces: []string{"jobs"}, Redis: []string{"default"}, HygieneStreams: []string{"jobs*"}})
	require.NoError(t, c.Validate())
}

func TestProfilesAndRuleGlobsNameTheFieldAndWhatIsAccepted(t *testing.T) {
	t.Parallel()
	hb := map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "30"}
	cases := map[string]struct {
		tune           func(c *config.Config)
		field, mention string
	}{
		"a key no profile holds": {
			tune: func(c *config.Config) {
				c.Triggers.Profiles = map[string]map[string]string{"w": {"reclaim": "requeue"}}
			},
			field: "triggers.profiles.w.reclaim", mention: "not a liveness key",
		},
		"a malformed threshold": {
			tune: func(c *config.Config) {
				c.Triggers.Profiles = map[string]map[string]string{"w": {"ghostIdleSeconds": "soon"}}
			},
			field: "triggers.profiles.w.ghostIdleSeconds", mention: "seconds",
		},
		"a bad name": {
			tune:  func(c *config.Config) { c.Triggers.Profiles = map[string]map[string]string{"-w": hb} },
			field: "triggers.profiles.-w", mention: "1-63 letters",
		},
		"kubernetes without its namespace": {
			tune: func(c *config.Config) {
				c.Kubernetes.Enabled = true
				c.Triggers.Profiles = map[string]map[string]string{"pods": {"liveness": "kubernetes", "podSelector": "app=w"}}
			},
			field: "triggers.profiles.pods.podNamespace", mention: "required",
		},
		"kubernetes with idle below the floor": {
			tune: func(c *config.Config) {
				c.Kubernetes.Enabled = true
				c.Triggers.Profiles = map[string]map[string]string{"pods": {"liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs", "ghostIdleSeconds": "0.001"}}
			},
			field: "triggers.profiles.pods.ghostIdleSeconds", mention: "triggers.floors.ghostIdle",
		},
		"kubernetes with no pod grace": {
			tune: func(c *config.Config) {
				c.Kubernetes.Enabled = true
				c.Triggers.Profiles = map[string]map[string]string{"pods": {"liveness": "kubernetes", "podSelector": "app=w", "podNamespace": "jobs", "podDeletionGraceSeconds": "0"}}
			},
			field: "triggers.profiles.pods.podDeletionGraceSeconds", mention: "triggers.floors.podDeletionGrace",
		},
		"a heartbeat max age below the floor": {
			tune: func(c *config.Config) {
				c.Triggers.Profiles = map[string]map[string]string{"w": {"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}}
			},
			field: "triggers.profiles.w.heartbeatMaxAgeSeconds", mention: "triggers.floors.heartbeatMaxAge",
		},
		"a rule's profile name that names none": {
			tune: func(c *config.Config) {
				c.Triggers.Profiles = map[string]map[string]string{"w": hb}
				c.Triggers.Rules[0].Profiles = []string{"x*", "v"}
			},
			field: "triggers.rules[0].profiles[1]", mention: "names no profile",
		},
		"a bad heartbeat key glob": {
			tune:  func(c *config.Config) { c.Triggers.Rules[0].HeartbeatKeys = []string{"hb:[a-"} },
			field: "triggers.rules[0].heartbeatKeys[0]", mention: "path.Match",
		},
		"no pod grace floor":           {tune: func(c *config.Config) { c.Triggers.Floors.PodDeletionGrace = 0 }, field: "triggers.floors.podDeletionGrace", mention: "positive"},
		"no dead-letter floor":         {tune: func(c *config.Config) { c.Triggers.Floors.MaxDeliveries = 0 }, field: "triggers.floors.maxDeliveries", mention: ">= 1"},
		"no warm-up":                   {tune: func(c *config.Config) { c.Triggers.WarmUp = 0 }, field: "triggers.warmUp", mention: "positive"},
		"a warm-up of a nanosecond":    {tune: func(c *config.Config) { c.Triggers.WarmUp = time.Nanosecond }, field: "triggers.warmUp", mention: "at least 1ms"},
		"no room for triggers' views":  {tune: enrolling(1000, 1000, nil), field: "scaler.maxTargets", mention: "hygiene.maxTargets"},
		"reservations past the scaler": {tune: enrolling(25, 12, []string{"a", "b", "c"}), field: "triggers.rules", mention: "scaler.maxTargets"},
		"reservations past hygiene":    {tune: enrolling(10000, 10, []string{"a", "b", "c"}), field: "triggers.rules", mention: "hygiene.maxTargets"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tc.tune(&c)
			err := c.Validate()
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			var found bool
			for _, p := range cfgErr.Problems {
				if p.Field == tc.field {
					found = true
					require.Contains(t, p.Problem, tc.mention)
				}
			}
			require.True(t, found, "no problem named %s in %v", tc.field, err)
		})
	}
}

// enrolling lets triggers enroll groups, with the caps given and a rule
// naming namespaces literally, each with quotas of 5 targets and 4
// groups.
func enrolling(scalerMax, hygieneMax int, namespaces []string) func(*config.Config) {
	return func(c *config.Config) {
		c.Scaler.MaxTargets, c.Hygiene.MaxTargets = scalerMax, hygieneMax
		c.Triggers.Reclaim = policy.ReclaimRequeue
		c.Triggers.Quotas = config.TriggerQuotas{ScalerTargets: 5, HygieneTargets: 4}
		c.Triggers.Rules = []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}, HygieneStreams: []string{"*"}}}
		if namespaces != nil {
			c.Triggers.Rules = append(c.Triggers.Rules, config.TriggerRule{Namespaces: namespaces, Redis: []string{"*"}, HygieneStreams: []string{"*"}})
		}
	}
}

func TestSharesReserveTheQuotasOfNamespacesNamedLiterally(t *testing.T) {
	t.Parallel()
	c := valid()
	enrolling(40, 10, []string{"jobs", "team-*", "ops"})(&c)
	c.Hygiene.Targets = []map[string]string{{"stream": "s", "consumerGroup": "g", "reclaim": "requeue"}}
	c.Triggers.Rules = append(c.Triggers.Rules, config.TriggerRule{Namespaces: []string{"metrics-only"}, Redis: []string{"*"}})
	require.NoError(t, c.Validate())
	require.Equal(t, config.TriggerShares{
		Triggers: 80, ScalerTargets: 30, HygieneTargets: 9,
		Reserved: map[string]bool{"jobs": true, "ops": true, "metrics-only": false},
	}, c.TriggerShares(), "the loop's targets leave the view's rest to triggers; the configured target counts against hygiene.maxTargets")

	c.Triggers.Reclaim = policy.ReclaimOff
	s := c.TriggerShares()
	require.Equal(t, 39, s.ScalerTargets, "with no trigger hygiene the loop holds only the configured target")
	require.False(t, s.Reserved["jobs"], "and nothing reserves hygiene")
}
