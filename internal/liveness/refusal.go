package liveness

// Refusal is why a Redis node refuses writes: a worker cannot write its
// heartbeat there, however alive, so a stale or missing one says nothing
// (invariant 12). Its values are Redis's own error prefixes.
type Refusal uint8

// The refusals, by the error prefix a refused write is answered with.
const (
	RefusalNone Refusal = iota
	// RefusalOOM: used memory is above maxmemory and nothing can be
	// evicted (maxmemory-policy noeviction, or no key the policy may
	// take). Reads, XREADGROUP and XACK still run.
	RefusalOOM
	// RefusalMisconf: the last RDB save failed with
	// stop-writes-on-bgsave-error, or an AOF write failed. Every write
	// is refused, XREADGROUP and XACK too.
	RefusalMisconf
	// RefusalReadonly: the node is a read-only replica, such as a master
	// demoted by REPLICAOF.
	RefusalReadonly
	// RefusalNoReplicas: fewer replicas are in sync than
	// min-replicas-to-write.
	RefusalNoReplicas
)

// Refusals lists the refusals, each once.
var Refusals = []Refusal{RefusalOOM, RefusalMisconf, RefusalReadonly, RefusalNoReplicas}

// String is the error prefix Redis answers the refusal with.
func (r Refusal) String() string {
	switch r {
	case RefusalOOM:
		return "OOM"
	case RefusalMisconf:
		return "MISCONF"
	case RefusalReadonly:
		return "READONLY"
	case RefusalNoReplicas:
		return "NOREPLICAS"
	default:
		return "none"
	}
}

// Cause says in words what makes Redis refuse writes so.
func (r Refusal) Cause() string {
	switch r {
	case RefusalOOM:
		return "used memory is above maxmemory and nothing may be evicted (maxmemory-policy noeviction, or no key the policy may take)"
	case RefusalMisconf:
		return "the last RDB save failed and stop-writes-on-bgsave-error is set, or an AOF write failed"
	case RefusalReadonly:
		return "the node is a read-only replica (a master demoted by REPLICAOF or a failover)"
	case RefusalNoReplicas:
		return "fewer replicas are in sync than min-replicas-to-write"
	default:
		return "writes are accepted"
	}
}

// BlocksReads says the refusal also refuses XREADGROUP and XACK, which
// Redis counts as writes: a worker's reads stop too, so its idle time
// grows. Only OOM lets them through (they are not denied on memory).
func (r Refusal) BlocksReads() bool { return r != RefusalNone && r != RefusalOOM }
