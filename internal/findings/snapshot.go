package findings

import (
	"fmt"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// fromSnapshot gives the findings the liveness view already knows: names
// read after their pod went, consumers with no pod or no owner, heartbeats
// from the future, a group without heartbeat records, a NULL lag, and a
// kubernetes source that cannot answer.
func fromSnapshot(s *liveness.Snapshot) []Finding {
	var out []Finding
	spec := s.Target.Spec
	if s.PodsErr != "" {
		out = append(out, Finding{Kind: PodsUnobserved, Detail: s.PodsErr + "; until the kubernetes source answers, " +
			"consumers not read from within the read grace are Unknown: counted as live, and nothing of theirs is reclaimed"})
	}
	for _, c := range s.Consumers {
		if c.SharedName {
			out = append(out, Finding{Kind: SharedName, Consumer: c.Name, Detail: "the kubernetes source saw the name read after its pod went, " +
				"so another process uses it; two readers under one name share one PEL (" + liveness.ReasonsString(c.Reasons) + ")"})
		}
		if spec.Kubernetes && c.Pod == liveness.PodNone {
			out = append(out, Finding{Kind: NoPod, Consumer: c.Name, Detail: noPodDetail(spec, c)})
		}
		if c.Owner == "" {
			out = append(out, Finding{Kind: NoOwner, Consumer: c.Name, Detail: noOwnerDetail(spec, c)})
		}
		if spec.Heartbeat && spec.Owner.CandidatesCut(c.Name) {
			out = append(out, Finding{Kind: HeartbeatCandidatesCut, Consumer: c.Name, Detail: fmt.Sprintf("ownerMatch %s gives the name more "+
				"than %d owner candidates; only the %d longest are looked up (heartbeat keys read), so an owner named by a shorter "+
				"prefix is not found. Use ownerMatch regex:<pattern with (?P<owner>...)> for such names", spec.Owner, liveness.MaxCandidates,
				liveness.MaxCandidates)})
		}
		if c.IdleUndecided {
			out = append(out, Finding{Kind: IdleUndecided, Consumer: c.Name, Entries: c.Pending, Detail: fmt.Sprintf("the consumer holds %d entries and "+
				"only its idle time could judge it, but this Redis (before 7.2) counts idle from the last read that delivered "+
				"entries: a worker that polls an empty stream while it works on what it holds ages exactly like a dead one. "+
				"The consumer is Unknown: its entries are counted as live and never taken. Configure heartbeats (or the "+
				"kubernetes source) for this group, or upgrade Redis to 7.2 or later (%s)", c.Pending, liveness.ReasonsString(c.Reasons))})
		}
		if c.ClockSkew.Abs() > liveness.FutureTolerance {
			out = append(out, Finding{Kind: ClockSkew, Consumer: c.Name, Detail: clockSkewDetail(c)})
		}
		if c.Heartbeat == liveness.HeartbeatFuture {
			out = append(out, Finding{Kind: HeartbeatInFuture, Consumer: c.Name, Detail: fmt.Sprintf("the heartbeat is dated in the future "+
				"beyond the %s tolerance, so a broken clock on the worker's host or a writer that stores something other than the "+
				"current time wrote it; the consumer is judged Unknown, so its entries are counted as live and never taken, "+
				"until its heartbeat is dated now (%s)", liveness.FutureTolerance, liveness.ReasonsString(c.Reasons))})
		}
	}
	if s.NoHeartbeatRecords {
		out = append(out, Finding{Kind: NoHeartbeatRecords, Detail: noRecordsDetail(s)})
	}
	if s.Refused != liveness.RefusalNone || s.RefusedConsumers > 0 {
		out = append(out, Finding{Kind: WritesRefused, Detail: refusedDetail(s)})
	}
	if s.EvictedConsumers > 0 {
		out = append(out, Finding{Kind: HeartbeatsEvicted, Detail: fmt.Sprintf("the heartbeat keys of %d consumers are missing while their "+
			"Redis node evicts keys (its evicted_keys rose within heartbeatMaxAge %s): the keys may have been evicted, so those consumers "+
			"are Unknown, counted as live, nothing of theirs taken, until no key was evicted for the max age. Give Redis the memory it "+
			"needs, or a maxmemory-policy that cannot evict heartbeat keys: noeviction, or volatile-* with heartbeats written without an "+
			"expiry", s.EvictedConsumers, spec.HeartbeatMaxAge)})
	}
	if b := s.BreakerState(); b.Tripped() {
		out = append(out, Finding{Kind: Disruption, Detail: disruptionDetail(b)})
	}
	if s.LagEstimated {
		out = append(out, Finding{Kind: NullLag, Detail: fmt.Sprintf("XINFO GROUPS reports the lag as NULL, so Redis cannot count the "+
			"unread entries: entries after last-delivered-id %s were deleted (XDEL, XTRIM), or the group was created or moved "+
			"(XGROUP CREATE, SETID) to an id without ENTRIESREAD; lagCount and backlogCount use an estimate of %d, the entries "+
			"after last-delivered-id counted up to a cap, until the group reads past the deletions", s.LastDeliveredID, s.Lag)})
	}
	return out
}

func noPodDetail(spec liveness.Spec, c liveness.ConsumerView) string {
	return fmt.Sprintf("no pod of selector %q in namespace %s is named %s (ownerMatch %s), and none was seen to go; "+
		"the consumer is judged %s by its other sources. A worker outside the selector, outside Kubernetes, "+
		"or one that went before pelwarden watched uses this name",
		spec.PodSelector, spec.PodNamespace, strings.Join(spec.Owner.Candidates(c.Name), " or "), spec.Owner, c.Verdict)
}

func noOwnerDetail(spec liveness.Spec, c liveness.ConsumerView) string {
	var missing []string
	if spec.Heartbeat && strings.Contains(spec.HeartbeatKey, "{owner}") {
		missing = append(missing, "no heartbeat key "+spec.HeartbeatKey+" exists for any of them")
	}
	if spec.Kubernetes {
		missing = append(missing, "no pod of selector "+spec.PodSelector+" has any of their names")
	}
	var why string
	switch {
	case strings.HasPrefix(spec.Owner.String(), "regex:"):
		why = "the name does not match ownerMatch " + spec.Owner.String()
	case len(missing) == 0:
		why = "ownerMatch prefix knows owners only from heartbeat keys with {owner} or from pods of the kubernetes source, " +
			"and this target has neither"
	default:
		why = "no prefix of the name (" + strings.Join(spec.Owner.Candidates(c.Name), ", ") + ") is a known owner: " +
			strings.Join(missing, " and ")
	}
	return why + "; the consumer is judged " + c.Verdict.String() + " without an owner's evidence"
}

func noRecordsDetail(s *liveness.Snapshot) string {
	spec := s.Target.Spec
	example := ""
	if len(s.Consumers) > 0 {
		example = fmt.Sprintf(" (consumer %s: %s)", s.Consumers[0].Name, strings.Join(spec.HeartbeatKeys(s.Consumers[0].Name), ", "))
	}
	return fmt.Sprintf("no consumer of the group has a heartbeat record under heartbeatKey %s%s, so the pattern is probably "+
		"wrong (or every worker's key expired at once): all %d consumers are judged Unknown, their entries count as live and "+
		"hygiene takes none; check the pattern against the key the workers write (redis-cli --scan --pattern)",
		spec.HeartbeatKey, example, len(s.Consumers))
}

func disruptionDetail(b liveness.BreakerState) string {
	d := fmt.Sprintf("the disruption breaker tripped at %s: %d of the %d consumers Alive shortly before turned Ghost together on %s "+
		"evidence that no pod going confirmed, which a fault of the evidence (heartbeat writers down, workers cut off from Redis, "+
		"a jump of Redis's clock) explains better than that many deaths; it holds %d consumers Unknown, counted as live, nothing of "+
		"theirs taken, until a consumer shows evidence written after the trip, and one threshold more",
		b.TrippedAt.UTC().Format(time.RFC3339), b.Turned, b.Of, b.Source, b.Held)
	if !b.ReleasedAt.IsZero() {
		d += fmt.Sprintf("; that evidence came at %s", b.ReleasedAt.UTC().Format(time.RFC3339))
	}
	return d + ". Check the workers' heartbeats; Reclaim with force takes a held consumer's entries by hand"
}

func clockSkewDetail(c liveness.ConsumerView) string {
	way := "behind"
	if c.ClockSkew > 0 {
		way = "ahead of"
	}
	return fmt.Sprintf("the worker's clock runs at least %s %s Redis's, as the reads that saw its heartbeat change measure it "+
		"(the time it claims lies outside the stretch in which it was written). Heartbeats are judged on Redis's clock, so this is "+
		"never a death: a value that changed is a beat at the read that saw it; but a clock ahead beyond %s is not trusted at all "+
		"(Unknown). Fix the worker host's time (NTP)", c.ClockSkew.Abs().Round(time.Second), way, liveness.FutureTolerance)
}

func refusedDetail(s *liveness.Snapshot) string {
	d := "Redis refused writes lately"
	if s.Refused != liveness.RefusalNone {
		d = fmt.Sprintf("Redis refuses writes (%s: %s)", s.Refused, s.Refused.Cause())
	}
	return d + fmt.Sprintf(", so workers cannot write their heartbeats: %d consumers whose heartbeat is stale or missing are "+
		"Unknown, counted as live, nothing of theirs taken, until writes have been accepted for heartbeatMaxAge; hygiene pauses "+
		"while writes are refused (pelwarden_redis_writes_refused, pelwarden_hygiene_paused_turns_total)", s.RefusedConsumers)
}
