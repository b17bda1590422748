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
//
// HELLO and AUTH need no grant: Redis lets any connection run them.
const ACLCommands = "-@all +ping +client|setname +select +time +get +set +pexpire +del " +
	"+xinfo|groups +xinfo|consumers +xpending +xrange " +
	"+xrevrange +xread +client|id +client|unblock " +
	"+xadd +xack +xdel +xclaim +xgroup|delconsumer +evalsha +eval"
