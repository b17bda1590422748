package redisx

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Capabilities are the stream commands of Redis 8 a server knows. They are
// learnt from the server's own answers, never from its version: a build of
// Redis's unstable branch reports 255.255.255 and Valkey reports
// redis_version 7.2.4, whatever commands either has.
type Capabilities struct {
	// Release: XNACK (Redis 8.8) gives pending entries back to the group
	// with no owner, each keeping its id, for a claiming reader to take.
	Release bool
	// AckDel: XACKDEL (Redis 8.2, Valkey 9.2) acknowledges and deletes
	// entries in one command.
	AckDel bool
}

func (c Capabilities) String() string {
	var has []string
	if c.AckDel {
		has = append(has, "XACKDEL")
	}
	if c.Release {
		has = append(has, "XNACK")
	}
	if len(has) == 0 {
		return "none of XACKDEL, XNACK"
	}
	return strings.Join(has, ", ")
}

// probes are the commands Capabilities asks about, each sent with no
// argument. A server that knows the command answers that the arguments
// are wrong, before it checks the user's ACL or any key, so the attempt
// changes nothing, needs no grant and leaves nothing in the ACL LOG; one
// that does not know it answers unknown command.
var probes = []struct {
	command string
	set     func(*Capabilities)
}{
	{"XNACK", func(c *Capabilities) { c.Release = true }},
	{"XACKDEL", func(c *Capabilities) { c.AckDel = true }},
}

// knownCommand reads one probe's answer: true when the server knows the
// command, an error when the answer says neither.
func knownCommand(command string, err error) (bool, error) {
	switch {
	case err == nil:
		return false, fmt.Errorf("%s with no argument: the server accepted it", command)
	// HasErrorPrefix reads past the ERR of these answers.
	case redis.HasErrorPrefix(err, "wrong number of arguments"):
		return true, nil
	case redis.HasErrorPrefix(err, "unknown command"):
		return false, nil
	}
	return false, fmt.Errorf("%s with no argument: %w", command, err)
}

// ProbeCapabilities asks one server which commands it knows, in one round
// trip.
func ProbeCapabilities(ctx context.Context, c *redis.Client) (Capabilities, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(probes))
	for i, p := range probes {
		cmds[i] = pipe.Do(ctx, p.command)
	}
	_, _ = pipe.Exec(ctx)
	var caps Capabilities
	for i, p := range probes {
		known, err := knownCommand(p.command, cmds[i].Err())
		if err != nil {
			return Capabilities{}, err
		}
		if known {
			p.set(&caps)
		}
	}
	return caps, nil
}

// capsCache holds each node's capabilities, by address, with the run_id
// of the server they were learnt from: a restart or a failover onto
// another build is asked again.
type capsCache struct {
	mu    sync.Mutex
	nodes map[string]capsEntry
}

type capsEntry struct {
	runID string
	caps  Capabilities
}

// run is the run_id of the server the node's connections last reached;
// empty where INFO was refused.
func (n *nodeWatch) run() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runID
}

// Capabilities are those of the master serving stream on the named
// connection, learnt once per server (a new run_id asks again).
func (cs *Conns) Capabilities(ctx context.Context, name, stream string) (Capabilities, error) {
	n, err := cs.capsNode(ctx, name, stream)
	if err != nil {
		return Capabilities{}, err
	}
	caps, _, err := cs.caps.of(ctx, n)
	return caps, err
}

// capsNode is the server whose capabilities a stream's commands meet.
type capsNode struct {
	// key names the node in the cache: the connection and the address.
	key, addr string
	client    *redis.Client
	watch     *nodeWatch
}

func (cs *Conns) capsNode(ctx context.Context, name, stream string) (capsNode, error) {
	cn, ok := cs.conns[name]
	if !ok {
		return capsNode{}, fmt.Errorf("no redis connection named %q", name)
	}
	client, err := NodeForKey(ctx, cn.primary, stream)
	if err != nil {
		return capsNode{}, err
	}
	n := capsNode{addr: cn.watch.label, client: client, watch: cn.watch.single}
	if n.watch == nil {
		n.addr = client.Options().Addr
		n.watch = cn.watch.node(n.addr)
	}
	n.key = name + "\x00" + n.addr
	return n, nil
}

// of is n's capabilities, asked of the server unless known for its
// run_id; asked says they were.
func (c *capsCache) of(ctx context.Context, n capsNode) (caps Capabilities, asked bool, err error) {
	if e, ok := c.get(n.key); ok && e.runID == n.watch.run() {
		return e.caps, false, nil
	}
	caps, err = ProbeCapabilities(ctx, n.client)
	if err != nil {
		return Capabilities{}, false, fmt.Errorf("which stream commands %s knows: %w", n.addr, err)
	}
	// The run_id is read after the probe: its connection's INFO set it.
	c.put(n.key, capsEntry{runID: n.watch.run(), caps: caps})
	return caps, true, nil
}

// WithoutAckDel records that the connection's user may not run XACKDEL on
// the master serving stream (a script fell back to XACK and XDEL): the
// scripts stop asking for it there until that server restarts.
func (cs *Conns) WithoutAckDel(ctx context.Context, name, stream string) {
	n, err := cs.capsNode(ctx, name, stream)
	if err != nil {
		return
	}
	cs.caps.mu.Lock()
	defer cs.caps.mu.Unlock()
	if e, ok := cs.caps.nodes[n.key]; ok {
		e.caps.AckDel = false
		cs.caps.nodes[n.key] = e
	}
}

func (c *capsCache) get(key string) (capsEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[key]
	return e, ok
}

func (c *capsCache) put(key string, e capsEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = make(map[string]capsEntry)
	}
	c.nodes[key] = e
}

// logCapabilities learns and logs which stream commands the server behind
// node knows, at start, beside its version; a server already asked is not
// logged again.
func (cs *Conns) logCapabilities(ctx context.Context, name string, n capsNode) {
	log := cs.conns[name].watch.log.Load()
	caps, asked, err := cs.caps.of(ctx, n)
	switch {
	case log == nil, err == nil && !asked:
	case err != nil:
		log.Warn("could not learn which stream commands a redis server knows", "redis", name, "node", n.addr, "err", err)
	default:
		log.Info("redis stream commands", "redis", name, "node", n.addr, "has", caps.String())
	}
}
