package liveness

import (
	"fmt"
	"time"
)

// recovering is how much longer a node readable again since since must
// stay readable before evidence measured against threshold counts: a
// worker cut off from its node could not write a heartbeat or read,
// however alive, so a heartbeat or an idle time that aged while the node
// was out of reach says nothing until the worker has had a whole
// threshold to refresh it. since is zero where the fetcher does not
// follow nodes.
func recovering(threshold time.Duration, since, now time.Time) time.Duration {
	if since.IsZero() {
		return 0
	}
	return max(threshold-now.Sub(since), 0)
}

// refusedFor is recovering for a node that refuses writes (r), or
// accepts them again since since: while it refuses them, a whole
// threshold is left.
func refusedFor(threshold time.Duration, r Refusal, since, now time.Time) time.Duration {
	switch {
	case r == RefusalNone:
		return 0
	case since.IsZero():
		return threshold
	}
	return recovering(threshold, since, now)
}

// refusedReason says why evidence past its threshold is not evidence
// while writes are refused.
func refusedReason(src Source, setting string, threshold, left time.Duration, r Refusal) Reason {
	if left >= threshold {
		return Reason{Source: src, Age: -1, Detail: fmt.Sprintf("its Redis node refuses writes (%s: %s), so the worker cannot write: "+
			"evidence past %s %s counts once writes have been accepted that long", r, r.Cause(), setting, threshold)}
	}
	return Reason{Source: src, Age: threshold - left, Detail: fmt.Sprintf("its Redis node refused writes (%s) and accepts them again: "+
		"evidence past %s %s counts once they have been accepted that long, in %s; accepted for", r, setting, threshold, left.Round(time.Millisecond))}
}

// outageReason says why evidence past its threshold is not yet evidence.
func outageReason(src Source, setting string, threshold, left time.Duration) Reason {
	return Reason{Source: src, Age: threshold - left, Detail: fmt.Sprintf(
		"its Redis node is readable again only since an outage, a failover, a restart or pelwarden's start: "+
			"evidence past %s %s counts once the node has been readable that long, in %s; readable for",
		setting, threshold, left.Round(time.Millisecond))}
}
