package redisx

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerVersion is what a server says it is in HELLO.
type ServerVersion struct {
	// Server is "redis" or "valkey".
	Server string
	// Version is as the server gives it, such as "7.0.15".
	Version      string
	Major, Minor int
}

func (v ServerVersion) String() string { return v.Server + " " + v.Version }

// IdleFromDeliveries reports whether the server's XINFO CONSUMERS idle
// counts from the last read that delivered entries, so that a read finding
// nothing does not reset it: Redis before 7.2. From 7.2 idle counts from
// the last read attempt; Valkey forked from Redis 7.2.4 and counts so too.
func (v ServerVersion) IdleFromDeliveries() bool {
	return v.Server == "redis" && (v.Major < 7 || v.Major == 7 && v.Minor < 2)
}

// parseHello reads the server and version fields of a HELLO reply: a map
// under RESP3, a flat list of names and values under RESP2.
func parseHello(reply any) (ServerVersion, error) {
	fields := map[string]string{}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			fields[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			fields[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
		}
	default:
		return ServerVersion{}, fmt.Errorf("HELLO: unexpected reply %T", reply)
	}
	v := ServerVersion{Server: fields["server"], Version: fields["version"]}
	major, rest, _ := strings.Cut(v.Version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	var okMajor, okMinor bool
	v.Major, okMajor = versionNumber(major)
	v.Minor, okMinor = versionNumber(minor)
	if v.Server == "" || !okMajor || !okMinor {
		return ServerVersion{}, fmt.Errorf("HELLO: no server and version in %v", reply)
	}
	return v, nil
}

// versionNumber reads one part of a version: 1 to 6 decimal digits.
func versionNumber(s string) (int, bool) {
	if len(s) == 0 || len(s) > 6 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// versionTTL is how long a node's version is trusted: a node upgraded in
// place, or a master replaced by a failover, is seen within it.
const versionTTL = time.Minute

// versions keeps each node's server version, read with HELLO: with no
// argument it changes nothing on the connection, and any connection may
// run it (no ACL grant needed). One HELLO per node per versionTTL.
type versions struct {
	mu     sync.Mutex
	log    *slog.Logger
	byNode map[string]versionEntry
}

type versionEntry struct {
	v    ServerVersion
	read time.Time
}

// SetVersionLog has the connections log each server's version when it is
// first read or changes, and warn where idle counts delivering reads only.
func (cs *Conns) SetVersionLog(log *slog.Logger) {
	cs.versions.mu.Lock()
	defer cs.versions.mu.Unlock()
	cs.versions.log = log
}

// IdleRule says how idle is to be read for stream on the named
// connection: fromDeliveries when the master serving it counts idle from
// delivering reads only (Redis before 7.2), and judgesHolders when the
// operator lets idle alone judge consumers holding entries all the same
// (redis[].idleBefore72: ghost). A version that cannot be read counts as
// before 7.2, the cautious reading: a consumer holding entries that idle
// alone would judge is then Unknown, never Ghost.
func (cs *Conns) IdleRule(ctx context.Context, name, stream string) (fromDeliveries, judgesHolders bool) {
	c, ok := cs.conns[name]
	if !ok {
		return true, false
	}
	node, err := NodeForKey(ctx, c.primary, stream)
	if err != nil {
		return true, c.idleGhost
	}
	v, err := cs.nodeVersion(ctx, name, node)
	return err != nil || v.IdleFromDeliveries(), c.idleGhost
}

// ReadVersions reads the version of every master of every connection and
// logs them; a connection that cannot be reached is left for its first
// read. pelwarden calls it at start, so a server whose idle counts
// delivering reads only is named before any verdict depends on it.
func (cs *Conns) ReadVersions(ctx context.Context) {
	for _, name := range cs.Names() {
		switch c := cs.conns[name].primary.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				_, err := cs.nodeVersion(ctx, name, node)
				return err
			})
		case *redis.Client:
			_, _ = cs.nodeVersion(ctx, name, c)
		}
	}
}

func (cs *Conns) nodeVersion(ctx context.Context, name string, node *redis.Client) (ServerVersion, error) {
	key := name + "\x00" + node.Options().Addr
	now := time.Now()
	vs := &cs.versions
	vs.mu.Lock()
	e, ok := vs.byNode[key]
	vs.mu.Unlock()
	if ok && now.Sub(e.read) < versionTTL {
		return e.v, nil
	}
	reply, err := node.Do(ctx, "HELLO").Result()
	if err != nil {
		return e.v, fmt.Errorf("HELLO: %w", err)
	}
	v, err := parseHello(reply)
	if err != nil {
		return e.v, err
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.byNode == nil {
		vs.byNode = map[string]versionEntry{}
	}
	vs.byNode[key] = versionEntry{v: v, read: now}
	if vs.log != nil && (!ok || e.v != v) {
		logVersion(vs.log, name, node.Options().Addr, v)
	}
	return v, nil
}

func logVersion(log *slog.Logger, name, addr string, v ServerVersion) {
	if v.IdleFromDeliveries() {
		log.Warn("this Redis counts a consumer's idle time from its last read that delivered entries, not its last read attempt "+
			"(before 7.2): a worker that polls an empty stream while it works on entries it holds looks as idle as a dead one, "+
			"so where idle alone would judge such a consumer (liveness idle, without heartbeats or pods) it is Unknown, "+
			"counted as live, and its entries are never taken (unless redis[].idleBefore72 is ghost); configure heartbeats or upgrade to 7.2",
			"redis", name, "node", addr, "server", v.String())
		return
	}
	log.Info("redis server", "redis", name, "node", addr, "server", v.String())
}
