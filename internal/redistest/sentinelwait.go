package redistest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// agreedMaster returns the node all running sentinels name as master, once
// it also answers as one.
func (s *Sentinel) agreedMaster(ctx context.Context) (*Server, error) {
	var addr string
	for _, sn := range s.sentinels {
		if !sn.running() {
			continue
		}
		var got []string
		err := sn.do(ctx, func(c *redis.Client) error {
			var err error
			got, err = c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.opts.MasterName).StringSlice()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		if len(got) != 2 {
			return nil, fmt.Errorf("sentinel %s answered %v", sn.Addr(), got)
		}
		a := got[0] + ":" + got[1]
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %s and %s", addr, a)
		}
		addr = a
	}
	for _, n := range s.nodes {
		if n.Addr() != addr {
			continue
		}
		return n, n.do(ctx, func(c *redis.Client) error {
			repl, err := c.Info(ctx, "replication").Result()
			if err == nil && infoField(repl, "role") != "master" {
				err = fmt.Errorf("%s is named master but is a %s", addr, infoField(repl, "role"))
			}
			return err
		})
	}
	return nil, fmt.Errorf("sentinels name %q, not a node of this setup", addr)
}

// agreed reports nil once every running sentinel names the same master,
// knows every other running sentinel and every running replica as healthy,
// and every running replica's link to the master is up.
func (s *Sentinel) agreed(ctx context.Context) error {
	m, err := s.agreedMaster(ctx)
	if err != nil {
		return err
	}
	want := s.runningReplicas(m)
	for _, sn := range s.sentinels {
		if !sn.running() {
			continue
		}
		if err := sn.do(ctx, func(c *redis.Client) error { return s.sentinelKnows(ctx, c, len(want)) }); err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
	}
	for _, r := range want {
		err := r.do(ctx, func(c *redis.Client) error {
			repl, err := c.Info(ctx, "replication").Result()
			if err == nil && (infoField(repl, "master_port") != strconv.Itoa(m.port) || infoField(repl, "master_link_status") != "up") {
				err = fmt.Errorf("replica %s follows port %s, link %s", r.Addr(), infoField(repl, "master_port"), infoField(repl, "master_link_status"))
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Sentinel) runningReplicas(master *Server) []*Server {
	var rs []*Server
	for _, n := range s.nodes {
		if n != master && n.running() {
			rs = append(rs, n)
		}
	}
	return rs
}

// sentinelKnows checks one sentinel's view: its peers and healthy replicas.
func (s *Sentinel) sentinelKnows(ctx context.Context, c *redis.Client, replicas int) error {
	running := 0
	for _, sn := range s.sentinels {
		if sn.running() {
			running++
		}
	}
	peers, err := c.Do(ctx, "SENTINEL", "SENTINELS", s.opts.MasterName).Slice()
	if err != nil {
		return err
	}
	if len(peers) < running-1 {
		return fmt.Errorf("knows %d other sentinels, want %d", len(peers), running-1)
	}
	reps, err := c.Do(ctx, "SENTINEL", "REPLICAS", s.opts.MasterName).Slice()
	if err != nil {
		return err
	}
	healthy := 0
	for _, r := range reps {
		if replicaHealthy(r) {
			healthy++
		}
	}
	if healthy < replicas {
		return fmt.Errorf("knows %d healthy replicas, want %d", healthy, replicas)
	}
	return nil
}

// replicaHealthy reads one SENTINEL REPLICAS entry (a map in RESP3, a flat
// list in RESP2) and reports whether its flags are plain "slave".
func replicaHealthy(entry any) bool {
	switch e := entry.(type) {
	case map[any]any:
		return e["flags"] == "slave"
	case []any:
		for i := 0; i+1 < len(e); i += 2 {
			if e[i] == "flags" {
				return e[i+1] == "slave"
			}
		}
	}
	return false
}
