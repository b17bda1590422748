package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// FieldError is one problem with one setting. Field names where the setting
// came from: a config path such as `redis[1].addr`, an environment variable
// or a flag.
type FieldError struct {
	// Field is the config path, variable or flag that has the problem.
	Field string
	// Problem says what is wrong and what is accepted.
	Problem string
	// file marks a problem with a file the configuration names (a TLS
	// certificate or key, a token, a kubeconfig): one a configuration
	// only looked at (Sources.NoSecrets) does not have.
	file bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Error is an invalid configuration: every problem found, not just the first.
// Load and Validate return only this type, so a caller can tell a bad
// configuration (exit status 2) from a failure to run.
type Error struct {
	// Problems lists each problem, in the order found.
	Problems []*FieldError
}

// Error joins the problems one a line, as errors.Join does.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so errors.As finds a *FieldError.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// problems collects FieldErrors.
type problems []*FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// addFile adds a problem with a file the configuration names.
func (p *problems) addFile(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), file: true})
}

// withoutFiles leaves out the problems with files the configuration names.
func (p problems) withoutFiles() problems {
	var kept problems
	for _, e := range p {
		if !e.file {
			kept = append(kept, e)
		}
	}
	return kept
}

// err returns nil when there are no problems, else an *Error.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"json", "text"}
	// connectionName is an RFC 1123 label, so a name fits in Kubernetes
	// labels and metric label values without escaping.
	connectionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
)

// Validate checks every field and returns an *Error listing all problems, or
// nil. It also checks that the TLS files named can be read, and that the
// gRPC server's certificate, key and client CAs parse.
func (c *Config) Validate() error {
	var p problems
	c.validate(&p)
	return p.err()
}

func (c *Config) validate(p *problems) {
	checkListenAddr(p, "grpc.addr", c.GRPC.Addr, ":9090")
	checkPositive(p, "grpc.shutdownTimeout", c.GRPC.ShutdownTimeout, "10s")
	c.GRPC.TLS.validate(p, "grpc.tls")
	if n := c.GRPC.MaxRecvMsgBytes; n < minRecvMsgBytes || n > maxRecvMsgBytes {
		p.add("grpc.maxRecvMsgBytes", "must be bytes from %d to %d (default %d), got %d", minRecvMsgBytes, maxRecvMsgBytes, DefaultMaxRecvMsgBytes, n)
	}
	if c.GRPC.RefusedCallsPerSecond < 0 {
		p.add("grpc.refusedCallsPerSecond", "must be a count of calls a second, 0 for no limit (default 200), got %d", c.GRPC.RefusedCallsPerSecond)
	}
	checkListenAddr(p, "http.addr", c.HTTP.Addr, ":8080")
	if sameListenPort(c.GRPC.Addr, c.HTTP.Addr) {
		p.add("http.addr", "must differ from grpc.addr, both are %q", c.HTTP.Addr)
	}
	checkOneOf(p, "log.level", c.Log.Level, logLevels)
	checkOneOf(p, "log.format", c.Log.Format, logFormats)

	s := c.Scaler
	checkPositive(p, "scaler.freshness", s.Freshness, "1s")
	checkPositive(p, "scaler.requestTimeout", s.RequestTimeout, "3s")
	checkPositive(p, "scaler.targetIdleExpiry", s.TargetIdleExpiry, "10m")
	checkPositive(p, "scaler.activeResendInterval", s.ActiveResendInterval, "5s")
	checkAtLeastOne(p, "scaler.maxTargets", int64(s.MaxTargets))
	if s.MaxMetricsTargets < 0 {
		p.add("scaler.maxMetricsTargets", "must be a count of targets, 0 for none (default 1000), got %d", s.MaxMetricsTargets)
	}
	checkAtLeastOne(p, "scaler.lagEstimateCap", s.LagEstimateCap)
	checkShare(p, "scaler.maxActiveStreams", s.MaxActiveStreams, "scaler.maxActiveStreamsPerNamespace", s.MaxActiveStreamsPerNamespace)
	checkShare(p, "scaler.maxActiveStreams", s.MaxActiveStreams, "scaler.maxActiveTargetsPerGroup", s.MaxActiveTargetsPerGroup)
	if s.BreakerPercent < 1 || s.BreakerPercent > 100 {
		p.add("scaler.breakerPercent", "must be a percentage from 1 to 100, such as 55, got %d", s.BreakerPercent)
	}
	checkAtLeastOne(p, "scaler.breakerMinConsumers", int64(s.BreakerMinConsumers))

	c.validateHygiene(p)
	c.validateKubernetes(p)
	c.validateAdmin(p)
	c.validateTriggers(p)

	if len(c.Redis) == 0 {
		p.add("redis", "at least one connection is required; set --redis-addr, "+
			"PELWARDEN_REDIS_ADDR or a redis list in the config file")
	}
	seen := make(map[string]int, len(c.Redis))
	for i, r := range c.Redis {
		path := fmt.Sprintf("redis[%d]", i)
		if first, dup := seen[r.Name]; dup && r.Name != "" {
			p.add(path+".name", "must be unique, %q is also redis[%d].name", r.Name, first)
		} else {
			seen[r.Name] = i
		}
		r.validate(p, path)
	}
}

func (r *Redis) validate(p *problems, path string) {
	if len(r.Name) > 63 || !connectionName.MatchString(r.Name) {
		p.add(path+".name", "must be 1-63 lowercase letters, digits or '-', "+
			"starting and ending with a letter or digit, such as %q, got %q", metadata.DefaultConnection, r.Name)
	}
	r.validateMode(p, path)
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		p.add(path+".passwordEnv", "is mutually exclusive with passwordFile; set one of them")
	}
	if r.DB < 0 {
		p.add(path+".db", "must be an integer >= 0, got %d", r.DB)
	}
	checkPositive(p, path+".dialTimeout", r.DialTimeout, "2s")
	checkPositive(p, path+".readTimeout", r.ReadTimeout, "2s")
	checkPositive(p, path+".writeTimeout", r.WriteTimeout, "2s")
	checkAtLeastOne(p, path+".poolSize", int64(r.PoolSize))
	if r.WaitReplicas < 0 {
		p.add(path+".waitReplicas", "must be an integer >= 0 (0 turns WAIT off), got %d", r.WaitReplicas)
	}
	checkPositive(p, path+".waitTimeout", r.WaitTimeout, "1s")
	switch r.IdleBefore72 {
	case IdleUnknown, IdleGhost, "":
	default:
		p.add(path+".idleBefore72", "must be %s or %s, got %q", IdleUnknown, IdleGhost, r.IdleBefore72)
	}
	r.TLS.validate(p, path+".tls")
}

// validateAddr checks Addr, which mode standalone requires.
func (r *Redis) validateAddr(p *problems, path string) {
	if r.Addr == "" && r.Name == metadata.DefaultConnection {
		p.add(path+".addr", "is required in mode standalone; for the connection named %s set --redis-addr or PELWARDEN_REDIS_ADDR "+
			"(or --redis-cluster-addrs, or --redis-sentinel-addrs with --redis-sentinel-master), such as %q",
			metadata.DefaultConnection, "redis:6379")
	} else {
		checkDialAddr(p, path+".addr", r.Addr)
	}
}

func (t *RedisTLS) validate(p *problems, path string) {
	if !t.Enabled {
		for _, f := range []struct {
			key string
			set bool
		}{
			{"caFile", t.CAFile != ""},
			{"certFile", t.CertFile != ""},
			{"keyFile", t.KeyFile != ""},
			{"serverName", t.ServerName != ""},
			{"insecureSkipVerify", t.InsecureSkipVerify},
		} {
			if f.set {
				p.add(path+"."+f.key, "requires %s.enabled: true (--redis-tls, PELWARDEN_REDIS_TLS for the default connection)", path)
			}
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.add(path+".certFile", "must be set together with keyFile, or neither")
	}
	checkReadable(p, path+".caFile", t.CAFile)
	checkReadable(p, path+".certFile", t.CertFile)
	checkReadable(p, path+".keyFile", t.KeyFile)
}

// minDuration is the shortest interval or timeout accepted: pelwarden's
// timers and Redis's own times count in milliseconds, and anything shorter
// (1ns passes "> 0") would spin a loop or time out every call.
const minDuration = time.Millisecond

func checkPositive(p *problems, field string, d time.Duration, example string) {
	switch {
	case d <= 0:
		p.add(field, "must be a positive duration such as %s, got %q", example, d)
	case d < minDuration:
		p.add(field, "must be at least %s, such as %s, got %q", minDuration, example, d)
	}
}

func checkAtLeastOne(p *problems, field string, n int64) {
	if n < 1 {
		p.add(field, "must be an integer >= 1, got %d", n)
	}
}

func checkOneOf(p *problems, field, value string, accepted []string) {
	for _, a := range accepted {
		if value == a {
			return
		}
	}
	p.add(field, "must be one of %s, got %q", strings.Join(accepted, ", "), value)
}

// checkListenAddr accepts host:port with an empty host (all interfaces) and
// port 0 (any free port, which tests use).
func checkListenAddr(p *problems, field, addr, example string) {
	if _, _, ok := splitAddr(addr, 0); !ok {
		p.add(field, "must be host:port with a numeric port 0-65535, such as %q, got %q", example, addr)
	}
}

// checkDialAddr accepts host:port with a host and a port a server can have.
func checkDialAddr(p *problems, field, addr string) {
	if host, _, ok := splitAddr(addr, 1); !ok || host == "" {
		p.add(field, "must be host:port with a host and a numeric port 1-65535, such as %q, got %q",
			"redis:6379", addr)
	}
}

func splitAddr(addr string, minPort int) (host string, port int, ok bool) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err = strconv.Atoi(portText)
	if err != nil || port < minPort || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// sameListenPort reports whether two listen addresses would collide. Port 0
// never collides: each listener gets its own free port.
func sameListenPort(a, b string) bool {
	hostA, portA, okA := splitAddr(a, 0)
	hostB, portB, okB := splitAddr(b, 0)
	if !okA || !okB || portA == 0 || portA != portB {
		return false
	}
	return hostA == hostB || hostA == "" || hostB == ""
}

func checkReadable(p *problems, field, path string) {
	if path == "" {
		return
	}
	f, err := os.Open(path) //nolint:gosec // G304: the operator configured this path; we only check it opens
	if err != nil {
		p.addFile(field, "must name a readable file: %s", pathErrText(err))
		return
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.IsDir() {
		p.addFile(field, "must name a readable file, %q is a directory", path)
	}
}

// pathErrText renders an *os.PathError as `"path": reason`, without the
// operation, which says nothing to someone fixing a config.
func pathErrText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%q: %v", pe.Path, pe.Err)
	}
	return err.Error()
}

// checkShare checks a global cap and its per-namespace share: each at
// least 1, the share no more than the cap.
func checkShare(p *problems, field string, n int, shareField string, share int) {
	checkAtLeastOne(p, field, int64(n))
	checkAtLeastOne(p, shareField, int64(share))
	if share > n && n >= 1 {
		p.add(shareField, "must be at most %s (%d), got %d", field, n, share)
	}
}

func (c *Config) validateKubernetes(p *problems) {
	k := c.Kubernetes
	checkShare(p, "kubernetes.maxPodWatches", k.MaxPodWatches, "kubernetes.maxPodWatchesPerNamespace", k.MaxPodWatchesPerNamespace)
	checkAtLeastOne(p, "kubernetes.apiQPS", int64(k.APIQPS))
	checkAtLeastOne(p, "kubernetes.apiBurst", int64(k.APIBurst))
	if k.Kubeconfig == "" {
		return
	}
	if !k.Enabled {
		p.add("kubernetes.kubeconfig", "requires kubernetes.enabled: true")
		return
	}
	checkReadable(p, "kubernetes.kubeconfig", k.Kubeconfig)
}

// maxHygieneWorkers bounds hygiene.workers: each worker is a scan, with its
// Redis round trips, running at once.
const maxHygieneWorkers = 256

func (c *Config) validateHygiene(p *problems) {
	h := c.Hygiene
	checkPositive(p, "hygiene.scanInterval", h.ScanInterval, "10s")
	if h.LeaseTTL <= h.ScanInterval {
		p.add("hygiene.leaseTTL", "must be longer than hygiene.scanInterval (%s), such as %q, got %q", h.ScanInterval, "30s", h.LeaseTTL)
	}
	if h.BatchSize < 1 || h.BatchSize > 10000 {
		p.add("hygiene.batchSize", "must be a whole number from 1 to 10000, got %d", h.BatchSize)
	}
	if h.Workers < 1 || h.Workers > maxHygieneWorkers {
		p.add("hygiene.workers", "must be a whole number from 1 to %d, got %d", maxHygieneWorkers, h.Workers)
	}
	checkAtLeastOne(p, "hygiene.maxTargets", int64(h.MaxTargets))
	env := c.Env()
	for i, md := range h.Targets {
		path := fmt.Sprintf("hygiene.targets[%d]", i)
		r, err := metadata.Parse(md, env)
		var me *metadata.Error
		switch {
		case errors.As(err, &me):
			p.add(path+"."+me.Key, "%s", strings.TrimPrefix(me.Error(), fmt.Sprintf("metadata %q: ", me.Key)))
		case err != nil:
			p.add(path, "%v", err)
		case r.Hygiene.Mode == policy.ReclaimOff:
			p.add(path+".reclaim", "must be requeue, claim or release for a hygiene target, got %q", md["reclaim"])
		}
	}
}
