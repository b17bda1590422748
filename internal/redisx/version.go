package redisx

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ServerVersion is what a server says it is in INFO server.
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

// parseInfoServer reads the server and its version from an INFO server
// reply. Valkey names itself in server_name and gives its own version in
// valkey_version (its redis_version stays 7.2.4, the Redis it forked
// from); Redis has neither and gives redis_version.
func parseInfoServer(info string) (ServerVersion, error) {
	v := ServerVersion{Server: infoField(info, "server_name")}
	if v.Server == "" {
		v.Server = "redis"
	}
	v.Version = infoField(info, v.Server+"_version")
	major, rest, _ := strings.Cut(v.Version, ".")
	minor, _, _ := strings.Cut(rest, ".")
	var okMajor, okMinor bool
	v.Major, okMajor = versionNumber(major)
	v.Minor, okMinor = versionNumber(minor)
	if !okMajor || !okMinor {
		return ServerVersion{}, fmt.Errorf("INFO server: no %s_version of the form major.minor", v.Server)
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

// SetVersionLog has the connections log each server's version when it is
// first read or changes, and warn where idle counts delivering reads only.
func (cs *Conns) SetVersionLog(log *slog.Logger) {
	for _, c := range cs.conns {
		c.watch.log.Store(log)
	}
}

// IdleRule says how idle is to be read for stream on the named
// connection: fromDeliveries when the master serving it counts idle from
// delivering reads only (Redis before 7.2), and judgesHolders when the
// operator lets idle alone judge consumers holding entries all the same
// (redis[].idleBefore72: ghost). A version that was not read (INFO
// refused) counts as before 7.2, the cautious reading: a consumer holding
// entries that idle alone would judge is then Unknown, never Ghost. It
// sends no command: the version was read when the connection was made.
func (cs *Conns) IdleRule(ctx context.Context, name, stream string) (fromDeliveries, judgesHolders bool) {
	c, ok := cs.conns[name]
	if !ok {
		return true, false
	}
	v, ok := c.watch.nodeVersion(ctx, c.primary, stream)
	return !ok || v.IdleFromDeliveries(), c.idleGhost
}

// nodeVersion is the version of the master serving key.
func (w *connWatch) nodeVersion(ctx context.Context, c redis.UniversalClient, key string) (ServerVersion, bool) {
	if w.single != nil {
		return w.single.serverVersion()
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return ServerVersion{}, false
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ServerVersion{}, false
	}
	return w.node(master.Options().Addr).serverVersion()
}

// ReadVersions has every master of every connection answer, so its
// version is read, and logs each version not logged yet with the stream
// commands it knows (Capabilities); a connection
// that cannot be reached is logged at its first connection. pelwarden
// calls it at start, so a server whose idle counts delivering reads only
// is named before any verdict depends on it.
func (cs *Conns) ReadVersions(ctx context.Context) {
	for _, name := range cs.Names() {
		c := cs.conns[name]
		switch p := c.primary.(type) {
		case *redis.ClusterClient:
			_ = p.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				addr := node.Options().Addr
				err := node.Ping(ctx).Err()
				c.watch.logVersion(c.watch.node(addr), addr)
				cs.logCapabilities(ctx, name, capsNode{key: name + "\x00" + addr, addr: addr, client: node, watch: c.watch.node(addr)})
				return err
			})
		case *redis.Client:
			_ = p.Ping(ctx).Err()
			c.watch.logVersion(c.watch.single, c.watch.label)
			cs.logCapabilities(ctx, name, capsNode{key: name + "\x00" + c.watch.label, addr: c.watch.label, client: p, watch: c.watch.single})
		}
	}
}

// logVersion logs n's version if it is new or changed and a log is set.
func (w *connWatch) logVersion(n *nodeWatch, addr string) {
	log := w.log.Load()
	if log == nil {
		return
	}
	if v, ok := n.toLog(); ok {
		logServer(log, w.name, addr, v)
	}
}

func logServer(log *slog.Logger, name, addr string, v ServerVersion) {
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
