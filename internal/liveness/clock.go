package liveness

import (
	"hash/maphash"
	"time"
)

// A heartbeat is judged on Redis's clock. The time a value claims is its
// worker's clock, which may run behind or ahead; what pelwarden knows for
// sure is when it saw the value change. So a snapshot remembers, for each
// consumer, which key and value it read (as hashes: never the value) and
// when, and the next read of the same key judges the beat from that:
//
//   - a value that changed since the last read was written after that read
//     and up to this one: at its claimed time if it lies between the two
//     (a claim cut to whole seconds or milliseconds may fall just before
//     the last read: written just after it), else at this read (a clock
//     behind or ahead beats at the read that sees it, and its skew is
//     measured);
//   - a value unchanged keeps the time it was given;
//   - a value read for the first time has only its claim: one dated past
//     the max age is Unknown until pelwarden has read it unchanged for a
//     max age;
//   - a key that vanished after a beat says no more than that beat did.
//
// A claim ahead of Redis's clock by more than FutureTolerance is still
// not trusted (HeartbeatFuture), however it changes.

// beatMemo is what a snapshot keeps of one consumer's heartbeat between
// reads: 40 bytes, whatever the value's size.
type beatMemo struct {
	// key and val are hashes of the key read and its value; val is 0
	// when the key was read missing.
	key, val uint64
	// at is the beat's time on Redis's clock, Unix ns; 0: none known.
	at int64
	// read is Redis's clock at the last read of the key, Unix ns; 0:
	// never read.
	read int64
	// first is when, on this process's clock (Unix ns), a value dated
	// past the max age was first read with no earlier read of its key
	// to compare; 0 otherwise.
	first int64
}

// beatSeed keys the hashes of one process; they are never compared
// across processes.
var beatSeed = maphash.MakeSeed()

func beatHash(s string) uint64 {
	if h := maphash.String(beatSeed, s); h != 0 {
		return h
	}
	return 1
}

// timed judges hb, as readHeartbeat read it from value at Redis's time
// server, against m, the memo of the consumer's previous read, and returns
// the memo of this one. now is this process's clock. The skew of a value
// unchanged is the one measured when it changed, skew.
func (m beatMemo) timed(spec Spec, hb *Heartbeat, value string, server, now time.Time, skew time.Duration) beatMemo {
	switch hb.State {
	case HeartbeatMissing:
		out := beatMemo{key: beatHash(hb.Key), at: m.at, read: server.UnixNano()}
		if m.at != 0 {
			hb.Vanished = max(spec.HeartbeatMaxAge-server.Sub(time.Unix(0, m.at)), 0)
		}
		return out
	case HeartbeatFresh, HeartbeatStale, HeartbeatFuture:
	default:
		return beatMemo{} // unread or unreadable: nothing to compare the next read with
	}
	key, val := beatHash(hb.Key), beatHash(value)
	out := beatMemo{key: key, val: val, read: server.UnixNano()}
	if hb.State == HeartbeatFuture {
		return out // not trusted; its next change is a beat after this read
	}
	claim := hb.claim
	switch {
	case m.read != 0 && m.key == key && m.val == val:
		out.at, out.first = m.at, m.first
		if out.at == 0 { // read from the future before, plausible now
			out.at = claim.UnixNano()
		}
		hb.Skew = skew
	case m.read != 0 && m.key == key:
		// Written after the last read and up to this one.
		after := time.Unix(0, m.read)
		switch {
		case claim.After(server):
			out.at, hb.Skew = server.UnixNano(), claim.Sub(server)
		case claim.After(after):
			out.at = claim.UnixNano()
		case claim.After(after.Add(-resolution(claim))):
			// A time cut to whole seconds or milliseconds may read as
			// before the last read: it was written just after it.
			out.at = m.read
		default:
			out.at, hb.Skew = server.UnixNano(), claim.Sub(after)
		}
	default:
		out.at = claim.UnixNano()
		if server.Sub(claim) > spec.HeartbeatMaxAge {
			out.first = now.UnixNano()
		}
	}
	age := max(server.Sub(time.Unix(0, out.at)), 0)
	hb.Age, hb.State = age, HeartbeatFresh
	if age > spec.HeartbeatMaxAge {
		hb.State = HeartbeatStale
		if out.first != 0 {
			hb.FirstRead = max(spec.HeartbeatMaxAge-now.Sub(time.Unix(0, out.first)), 0)
		}
	}
	return out
}

// resolution is how finely a claimed time was written: whole seconds
// (a Unix time in seconds), or milliseconds.
func resolution(claim time.Time) time.Duration {
	if claim.Nanosecond() == 0 {
		return time.Second
	}
	return time.Millisecond
}
