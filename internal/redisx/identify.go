package redisx

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// onConnect is the OnConnect of the node's connections. INFO server, on
// the new connection itself before any command runs on it, names the
// process behind it (run_id) and its version, in the one round trip the
// dial adds: no other connection is taken for it and no read meets a
// connection whose server is not yet known. A refused INFO (a user without
// +info) leaves the connection usable: a restart then shows only through
// failed commands, and idle is read as before 7.2.
func (w *connWatch) onConnect(n *nodeWatch, addr string) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if w.sentinel {
			if sentinel, err := isSentinel(ctx, cn); sentinel || err != nil {
				return err
			}
		}
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return handshakeErr(err)
		}
		v, _ := parseInfoServer(info)
		n.connected(infoField(info, "run_id"), v, time.Now())
		w.logVersion(n, addr)
		return nil
	}
}

// isSentinel says whether cn reached a sentinel: a FailoverClient dials
// its sentinels with the master's OnConnect. HELLO tells, and any
// connection may run it, where INFO would need a grant the sentinels'
// user does not have (and leave a denial in their ACL LOG).
func isSentinel(ctx context.Context, cn *redis.Conn) (bool, error) {
	reply, err := cn.Do(ctx, "HELLO").Result()
	if err != nil {
		return false, handshakeErr(err)
	}
	switch r := reply.(type) {
	case map[any]any:
		return r["mode"] == "sentinel", nil
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == "mode" {
				return r[i+1] == "sentinel", nil
			}
		}
	}
	return false, nil
}

// handshakeErr is what a command in onConnect that failed does to the
// dial: a Redis error (a refused command) leaves the connection usable;
// after a transport failure its replies may be out of step, so the dial
// fails, as it does in go-redis's own handshake.
func handshakeErr(err error) error {
	var refused redis.Error
	if errors.As(err, &refused) {
		return nil
	}
	return err
}

func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}
