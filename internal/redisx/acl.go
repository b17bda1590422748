package redisx

// ACLCommands is the command part of an ACL rule that gives pelwarden's
// Redis user what it runs and nothing else. Commands a Lua script calls are
// checked against the caller's user too, so the scripts' commands are here.
// Add key patterns (~* or the streams, heartbeat keys and
// pelwarden:lease:* keys it touches) and a password:
//
//	ACL SETUSER pelwarden on >PASSWORD ~* resetchannels <ACLCommands>
//
// Why each is needed:
//   - ping: readiness.
//   - client|setname: every connection is named "pelwarden" for CLIENT LIST.
//   - select: a connection with db other than 0.
//   - time: heartbeat ages are measured on Redis's clock.
//   - info: INFO server on each new connection; its run_id tells a
//     restarted or failed-over server, whose heartbeats workers could not
//     write while it was away, even when no command failed, and its
//     version whether idle counts delivering reads only (before 7.2).
//     Without it idle is read as before 7.2.
//   - get: heartbeat keys, and the lease.
//   - set, pexpire, del: the hygiene lease (a script).
//   - xinfo|groups, xinfo|consumers, xpending: the snapshot read and the
//     guards in the scripts.
//   - xrange: the NULL-lag estimate, requeue copies and tombstone checks.
//   - xrevrange, xread, client|id, client|unblock: the stream waker behind
//     StreamIsActive (the last id of a stream when it is armed, then one
//     blocking XREAD per Redis, interrupted with CLIENT UNBLOCK).
//   - xadd, xack, xdel, xclaim, xgroup|delconsumer: requeue, dead-letter,
//     deleteOriginal, claim and deleting ghost consumers.
//   - evalsha, eval: every script (EVALSHA, then EVAL after NOSCRIPT).
//   - wait: waitReplicas, after each guarded write.
//
// Not in the list, since an older server refuses their names in ACL
// SETUSER: +xackdel (Redis 8.2: deleteOriginal acknowledges and deletes a
// page in one command; without it the script falls back to XACK and XDEL)
// and +xnack (Redis 8.8: reclaim release). Which commands a server has is
// learnt by sending each with no argument (capability.go), which needs no
// grant.
//
// HELLO and AUTH need no grant: Redis lets any connection run them (in
// mode sentinel, HELLO tells a sentinel's new connection from the
// master's, so that only the master's is asked INFO).
const ACLCommands = "-@all +ping +client|setname +select +time +info +get +set +pexpire +del " +
	"+xinfo|groups +xinfo|consumers +xpending +xrange " +
	"+xrevrange +xread +client|id +client|unblock " +
	"+xadd +xack +xdel +xclaim +xgroup|delconsumer +evalsha +eval +wait"

// ClusterACLCommands are added to ACLCommands on every node for a
// connection in mode cluster:
//   - cluster|slots: go-redis's ClusterClient learns the slot map with
//     CLUSTER SLOTS, at start, after MOVED and every few seconds.
//   - cluster|keyslot: the waker groups armed streams by hash slot, one
//     blocking XREAD per slot.
//   - asking: following an ASK redirection while a slot migrates.
//   - command: go-redis's ClusterClient reads the command table (COMMAND)
//     once per client, to know each command's keys and flags.
//   - readonly: replica connections, only with cluster.readOnly or a route
//     option (the admin API's ListPending reads replicas then).
const ClusterACLCommands = "+cluster|slots +cluster|keyslot +asking +command +readonly"

// SentinelACLCommands is the command part of the rule of pelwarden's user
// on the sentinels (sentinel.username), for a connection in mode sentinel.
// The master and replicas take ACLCommands as in mode standalone.
//   - ping, client|setname: as on any connection.
//   - sentinel|get-master-addr-by-name: where the master is now.
//   - sentinel|sentinels: go-redis learns the other sentinels.
//   - sentinel|replicas: replica connections, only with
//     sentinel.replicaReads.
//   - subscribe on the channels in SentinelACLChannels: go-redis follows a
//     failover the moment the sentinels announce it.
const SentinelACLCommands = "-@all +ping +client|setname +sentinel|get-master-addr-by-name " +
	"+sentinel|sentinels +sentinel|replicas +subscribe"

// SentinelACLChannels are the channels SentinelACLCommands subscribes to.
const SentinelACLChannels = "resetchannels &+switch-master &+replica-reconf-done"
