package config

import (
	"fmt"
	"slices"
	"strings"
)

// RedisMode is how a connection reaches Redis.
type RedisMode string

// The connection modes.
const (
	// RedisStandalone is one server at Addr (or a proxy that looks like one).
	RedisStandalone RedisMode = "standalone"
	// RedisSentinel finds the master of Sentinel.MasterName through
	// Sentinel.Addrs and follows it across failovers.
	RedisSentinel RedisMode = "sentinel"
	// RedisCluster is a Redis Cluster reached from Cluster.Addrs; commands
	// follow their key's slot, and MOVED and ASK redirections.
	RedisCluster RedisMode = "cluster"
)

// RedisModes lists the modes, in help order.
var RedisModes = []RedisMode{RedisStandalone, RedisSentinel, RedisCluster}

func modeNames() []string {
	names := make([]string, len(RedisModes))
	for i, m := range RedisModes {
		names[i] = string(m)
	}
	return names
}

// RedisSentinelConfig configures a connection in mode sentinel. The Redis
// username, password, TLS and db of the connection are those of the
// master and replicas; the sentinels may have their own credentials.
type RedisSentinelConfig struct {
	// MasterName is the name the sentinels monitor the master under.
	// Required in mode sentinel.
	MasterName string `yaml:"masterName"`
	// Addrs are the sentinels' host:port addresses. Required in mode
	// sentinel; at least one, more for availability.
	Addrs []string `yaml:"addrs"`
	// Username is the sentinels' ACL user. Optional; empty means the
	// default user.
	Username string `yaml:"username"`
	// Password is resolved at load time from PasswordEnv or PasswordFile,
	// as the connection's own password is.
	Password string `yaml:"-"`
	// PasswordEnv names an environment variable that holds the sentinels'
	// password. Mutually exclusive with PasswordFile.
	PasswordEnv string `yaml:"passwordEnv"`
	// PasswordFile is the path of a file that holds the sentinels'
	// password. Mutually exclusive with PasswordEnv.
	PasswordFile string `yaml:"passwordFile"`
	// ReplicaReads lets the read-only diagnostics (the admin API's
	// DescribeTarget, ListPending, Plan) read from replicas, which may lag
	// the master. The scaler's numbers and hygiene always read the master.
	// Default false.
	ReplicaReads bool `yaml:"replicaReads"`
}

// RedisClusterConfig configures a connection in mode cluster.
type RedisClusterConfig struct {
	// Addrs are seed host:port addresses of cluster nodes; the client
	// learns the rest from them. Required in mode cluster; at least one.
	Addrs []string `yaml:"addrs"`
	// ReadOnly lets the read-only diagnostics (the admin API's
	// DescribeTarget, ListPending, Plan) read from replicas, which may lag
	// their master, as go-redis's ReadOnly option does. The scaler's numbers
	// and hygiene always read masters. Default false.
	ReadOnly bool `yaml:"readOnly"`
	// RouteByLatency sends those diagnostic reads to the closest node of
	// the slot, master or replica; implies ReadOnly. Default false.
	RouteByLatency bool `yaml:"routeByLatency"`
	// RouteRandomly sends those diagnostic reads to a random node of the
	// slot; implies ReadOnly. Default false.
	RouteRandomly bool `yaml:"routeRandomly"`
}

// ReplicaReads reports whether read-only diagnostics of r may come from a
// replica.
func (r *Redis) ReplicaReads() bool {
	switch r.Mode {
	case RedisSentinel:
		return r.Sentinel.ReplicaReads
	case RedisCluster:
		return r.Cluster.ReadOnly || r.Cluster.RouteByLatency || r.Cluster.RouteRandomly
	case RedisStandalone:
	}
	return false
}

// Seeds returns the addresses r dials first: Addr, the sentinels or the
// cluster seeds.
func (r *Redis) Seeds() []string {
	switch r.Mode {
	case RedisSentinel:
		return r.Sentinel.Addrs
	case RedisCluster:
		return r.Cluster.Addrs
	case RedisStandalone:
	}
	return []string{r.Addr}
}

// validateMode checks the mode and the options of the chosen mode, and
// that options of another mode are not set, so a half-edited connection
// fails loudly instead of dialing somewhere unexpected.
func (r *Redis) validateMode(p *problems, path string) {
	mode := r.Mode
	if mode == "" {
		mode = RedisStandalone
	}
	checkOneOf(p, path+".mode", string(mode), modeNames())
	if mode == RedisStandalone {
		r.validateAddr(p, path)
	} else if r.Addr != "" {
		p.add(path+".addr", "is for mode standalone; in mode %s set %s.%s.addrs instead (got addr %q)", mode, path, mode, r.Addr)
	}
	s, c := r.Sentinel, r.Cluster
	if mode == RedisSentinel {
		if s.MasterName == "" {
			p.add(path+".sentinel.masterName", "is required in mode sentinel: the name the sentinels monitor the master under (--redis-sentinel-master for the default connection)")
		}
		checkAddrList(p, path+".sentinel.addrs", s.Addrs, "--redis-sentinel-addrs")
		if s.PasswordEnv != "" && s.PasswordFile != "" {
			p.add(path+".sentinel.passwordEnv", "is mutually exclusive with sentinel.passwordFile; set one of them")
		}
	} else {
		checkUnset(p, path, RedisSentinel, mode, map[string]bool{
			"masterName": s.MasterName != "", "addrs": len(s.Addrs) > 0, "username": s.Username != "",
			"passwordEnv": s.PasswordEnv != "", "passwordFile": s.PasswordFile != "", "replicaReads": s.ReplicaReads,
		})
	}
	if mode == RedisCluster {
		checkAddrList(p, path+".cluster.addrs", c.Addrs, "--redis-cluster-addrs")
		if r.DB != 0 {
			p.add(path+".db", "must be 0 in mode cluster: Redis Cluster has only database 0, got %d", r.DB)
		}
	} else {
		checkUnset(p, path, RedisCluster, mode, map[string]bool{
			"addrs": len(c.Addrs) > 0, "readOnly": c.ReadOnly,
			"routeByLatency": c.RouteByLatency, "routeRandomly": c.RouteRandomly,
		})
	}
}

func checkAddrList(p *problems, field string, addrs []string, flag string) {
	if len(addrs) == 0 {
		p.add(field, "needs at least one host:port, such as %q (%s for the default connection)", "redis-0:6379", flag)
	}
	for i, a := range addrs {
		checkDialAddr(p, fmt.Sprintf("%s[%d]", field, i), a)
	}
}

// checkUnset reports the set options of the block of mode want, which the
// connection's mode does not use.
func checkUnset(p *problems, path string, want, mode RedisMode, set map[string]bool) {
	var keys []string
	for k, v := range set {
		if v {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	p.add(fmt.Sprintf("%s.%s.%s", path, want, keys[0]), "is for mode %s; this connection's mode is %s (set mode: %s, or remove %s.%s)",
		want, mode, want, want, strings.Join(keys, ", "))
}
