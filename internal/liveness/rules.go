package liveness

import (
	"fmt"
	"time"
)

// Section is a part of the verdict table: the evidence its rows judge by.
// A consumer is judged by the rows of one section after the first, which
// ends with a row that always applies.
type Section string

// The sections of the verdict table, in the order they are looked at.
const (
	SectionEvery     Section = "every consumer"
	SectionPodGone   Section = "its pod was seen to go (kubernetes)"
	SectionHeartbeat Section = "with heartbeats"
	SectionIdle      Section = "without heartbeats"
)

// in says whether a consumer with ev, judged by spec, is judged by the
// section's rows.
func (s Section) in(spec Spec, ev Evidence) bool {
	switch s {
	case SectionPodGone:
		return spec.Kubernetes && ev.Pod.State == PodGone
	case SectionHeartbeat:
		return spec.Heartbeat
	case SectionIdle:
		return !spec.Heartbeat
	default:
		return true
	}
}

// Rule is one row of the verdict table: the first row, in order, that
// applies to a consumer's evidence gives its verdict. The table is data
// that Judge walks and that docs/reference/liveness-rules.md is written
// from; a new rule is a new row, with a test of its own.
type Rule struct {
	// Name identifies the row, in tests and in the docs.
	Name    string
	Section Section
	// When says when the row applies, and Why why its verdict is right.
	When, Why string
	Verdict   Verdict

	applies func(spec Spec, ev Evidence) bool
	// note adds the row's own reason to the judgement, or its flags, and
	// returns it: a judgement passed by value stays on the stack.
	note func(spec Spec, ev Evidence, j Judgement) Judgement
	// gap is the missing evidence the row holds Unknown for, which a
	// snapshot counts.
	gap gap
}

// gap is a kind of missing evidence a snapshot counts its consumers by.
type gap uint8

const (
	gapNone gap = iota
	// gapRefused: writes were refused lately.
	gapRefused
	// gapEvicted: the key may have been evicted.
	gapEvicted
)

// Rule names the row of the verdict table that decided cv's verdict
// before the breaker (Rules); empty for pelwarden's own holder.
func (cv ConsumerView) Rule() string {
	if cv.rule == 0 {
		return ""
	}
	return rules[cv.rule-1].Name
}

// gap is the gap in the evidence that held cv Unknown, if its row counts
// one.
func (cv ConsumerView) gap() gap {
	if cv.rule == 0 || cv.Verdict != Unknown {
		return gapNone
	}
	return rules[cv.rule-1].gap
}

// Rules returns the verdict table's rows in the order Judge looks at them.
func Rules() []Rule { return append([]Rule(nil), rules...) }

// rules is the verdict table. Within a section the order is the order of
// precedence: a fresh heartbeat outranks a pod that cannot be seen, an
// outage outranks a stale heartbeat, and so on.
var rules = []Rule{
	{
		Name: "unlisted", Section: SectionEvery, Verdict: Unknown,
		When:    "the consumer is in the XPENDING summary but not in XINFO CONSUMERS of the same read",
		Why:     "nothing is known of it",
		applies: func(_ Spec, ev Evidence) bool { return !ev.Listed },
		note: func(_ Spec, _ Evidence, j Judgement) Judgement {
			j.Reasons = []Reason{{Source: SourceIdle, Detail: "consumer is in the pending summary but not in XINFO CONSUMERS", Age: -1}}
			return j
		},
	},

	{
		Name: "shared-name-degraded", Section: SectionPodGone, Verdict: Degraded,
		When:    "the name was read, or its heartbeat written, after its pod went, and that heartbeat says degraded",
		Why:     "another process uses the name (a shared name); it says it cannot do the work",
		applies: func(spec Spec, ev Evidence) bool { return usedSinceGone(spec, ev) && freshDegraded(spec, ev) },
		note:    sharedName,
	},
	{
		Name: "shared-name", Section: SectionPodGone, Verdict: Alive,
		When:    "the name was read, or its heartbeat written, after its pod went",
		Why:     "another process uses the name: reported as a shared name",
		applies: usedSinceGone,
		note:    sharedName,
	},
	{
		Name: "pod-gone-heartbeat-unreadable", Section: SectionPodGone, Verdict: Unknown,
		When: "heartbeats are configured and the heartbeat could not be read, parsed or trusted (from the future)",
		Why:  "it may have been written after the pod went",
		applies: func(spec Spec, ev Evidence) bool {
			s := ev.Heartbeat.State
			return spec.Heartbeat && (s == HeartbeatError || s == HeartbeatUnread || s == HeartbeatFuture)
		},
	},
	{
		Name: "pod-gone-grace", Section: SectionPodGone, Verdict: Alive,
		When:    "the pod went less than podDeletionGraceSeconds ago, and its controller may give its name to a new pod (not a ReplicaSet)",
		Why:     "a pod of the same name may be on its way",
		applies: func(spec Spec, ev Evidence) bool { return !ev.Pod.NameUnique && ev.Pod.GoneFor < spec.PodGrace },
	},
	{
		Name: "pod-gone", Section: SectionPodGone, Verdict: Ghost,
		When:    "otherwise: the grace passed, or a ReplicaSet's pod went (its name never returns)",
		Why:     "a pod seen to go is strong evidence of death, even with a heartbeat written before it went",
		applies: always,
	},

	{
		Name: "no-heartbeat-records", Section: SectionHeartbeat, Verdict: Unknown,
		When:    "no consumer of the group has a heartbeat record at all",
		Why:     "the key pattern is probably wrong: the no-heartbeat-records finding",
		applies: func(_ Spec, ev Evidence) bool { return ev.NoGroupHeartbeats },
		note: func(spec Spec, _ Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: -1, Detail: fmt.Sprintf(
				"no consumer of the group has a heartbeat record under heartbeatKey %s: the pattern is probably wrong, so no consumer is judged by it", spec.HeartbeatKey)})
			return j
		},
	},
	{
		Name: "heartbeat-future", Section: SectionHeartbeat, Verdict: Unknown,
		When:    fmt.Sprintf("the heartbeat is dated more than %s ahead of Redis's clock", FutureTolerance),
		Why:     "a broken clock or writer (SET hb:x 9999999999 would be alive forever): the heartbeat-in-future finding",
		applies: heartbeatIs(HeartbeatFuture),
	},
	{
		Name: "heartbeat-unreadable", Section: SectionHeartbeat, Verdict: Unknown,
		When: fmt.Sprintf("the read failed, or the value is not a heartbeat (unparsable, another type, dated more than %d days back)",
			PlausibleAge/(24*time.Hour)),
		Why:     "a source that cannot answer answers Unknown",
		applies: heartbeatIs(HeartbeatError),
	},
	{
		Name: "heartbeat-unread", Section: SectionHeartbeat, Verdict: Unknown,
		When:    "the key was not read yet (a consumer new to the read, past the heartbeat reads' cap)",
		Why:     "no evidence yet",
		applies: heartbeatIs(HeartbeatUnread),
	},
	{
		Name: "fresh-degraded", Section: SectionHeartbeat, Verdict: Degraded,
		When:    "the heartbeat is fresh and says degraded",
		Why:     "alive, but it says it cannot do the work: its entries are given back once stale",
		applies: freshDegraded,
	},
	{
		Name: "fresh", Section: SectionHeartbeat, Verdict: Alive,
		When:    "the heartbeat is fresh: no older than heartbeatMaxAgeSeconds on Redis's clock",
		Why:     "a fresh heartbeat is strong evidence of life, whatever idle says (a long job)",
		applies: heartbeatIs(HeartbeatFresh),
	},
	{
		Name: "pods-unobserved", Section: SectionHeartbeat, Verdict: Unknown,
		When:    "the kubernetes source cannot answer (its pod cache is not current, RBAC refuses)",
		Why:     "a pod that cannot be seen is not an absent pod",
		applies: podIs(PodUnobserved),
	},
	{
		Name: "pod-terminating", Section: SectionHeartbeat, Verdict: Alive,
		When:    "the kubernetes source sees the pod terminating",
		Why:     "it is finishing its work",
		applies: podIs(PodTerminating),
	},
	{
		Name: "starting", Section: SectionHeartbeat, Verdict: Alive,
		When: "no heartbeat yet, pelwarden has known the consumer for less than heartbeatStartGraceSeconds, and it read within it",
		Why:  "a starting worker, before its first heartbeat",
		applies: func(spec Spec, ev Evidence) bool {
			return ev.Heartbeat.State == HeartbeatMissing && ev.Known < spec.StartGrace && ev.Seen < spec.StartGrace
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: ev.Known, Detail: fmt.Sprintf(
				"a starting worker: no heartbeat yet, read within the start grace %s, known for", spec.StartGrace)})
			return j
		},
	},
	{
		Name: "heartbeat-outage", Section: SectionHeartbeat, Verdict: Unknown,
		When: "the heartbeat is stale or missing, and the key's node has been readable for less than heartbeatMaxAgeSeconds " +
			"(after an outage, a failover, a restart, or pelwarden's start)",
		Why: "the worker could not write meanwhile: absence of evidence is not death",
		applies: func(_ Spec, ev Evidence) bool {
			return ev.Heartbeat.Recovering > 0 && (ev.Heartbeat.State == HeartbeatStale || ev.Heartbeat.State == HeartbeatMissing)
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, outageReason(SourceHeartbeat, "heartbeatMaxAge", spec.HeartbeatMaxAge, ev.Heartbeat.Recovering))
			return j
		},
	},
	{
		Name: "writes-refused", Section: SectionHeartbeat, Verdict: Unknown, gap: gapRefused,
		When: "the heartbeat is stale or missing, and the key's node refuses writes (OOM, MISCONF, READONLY, NOREPLICAS) " +
			"or has accepted them again for less than heartbeatMaxAgeSeconds",
		Why: "the worker could not write its heartbeat: a refused write is an outage of evidence",
		applies: func(_ Spec, ev Evidence) bool {
			return ev.Heartbeat.Refused > 0 && (ev.Heartbeat.State == HeartbeatStale || ev.Heartbeat.State == HeartbeatMissing)
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, refusedReason(SourceHeartbeat, "heartbeatMaxAge", spec.HeartbeatMaxAge, ev.Heartbeat.Refused, ev.Heartbeat.Refusal))
			return j
		},
	},
	{
		Name: "heartbeat-evicted", Section: SectionHeartbeat, Verdict: Unknown, gap: gapEvicted,
		When: "no heartbeat, and the key's node evicted keys (its evicted_keys rose) less than heartbeatMaxAgeSeconds ago",
		Why:  "the key may have been evicted (maxmemory-policy allkeys-*, or volatile-* with keys written with an expiry)",
		applies: func(_ Spec, ev Evidence) bool {
			return ev.Heartbeat.State == HeartbeatMissing && ev.Heartbeat.Evicting > 0
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			left := ev.Heartbeat.Evicting
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: spec.HeartbeatMaxAge - left, Detail: fmt.Sprintf(
				"its Redis node evicts keys (maxmemory-policy), so the key may have been evicted: a missing key counts once none "+
					"was evicted for heartbeatMaxAge %s, in %s; last eviction seen", spec.HeartbeatMaxAge, left.Round(time.Millisecond))})
			return j
		},
	},
	{
		Name: "heartbeat-vanished", Section: SectionHeartbeat, Verdict: Unknown,
		When: "no heartbeat, and pelwarden read the key holding a beat less than heartbeatMaxAgeSeconds before",
		Why:  "a key that expired early, was deleted or evicted says no more than its last beat: judged as that beat once it is a max age old",
		applies: func(_ Spec, ev Evidence) bool {
			return ev.Heartbeat.State == HeartbeatMissing && ev.Heartbeat.Vanished > 0
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: spec.HeartbeatMaxAge - ev.Heartbeat.Vanished, Detail: fmt.Sprintf(
				"the key vanished (expired early, deleted or evicted) after a beat pelwarden read: judged as that beat, stale in %s; last beat",
				ev.Heartbeat.Vanished.Round(time.Millisecond))})
			return j
		},
	},
	{
		Name: "heartbeat-first-read", Section: SectionHeartbeat, Verdict: Unknown,
		When: "the value claims a time past heartbeatMaxAgeSeconds, pelwarden has read it, unchanged, for less than that, " +
			"and the name was read within it",
		Why: "the time a value claims is its worker's clock, which may run behind; a value that changes is a beat at the read " +
			"that sees it, and one that stays unchanged for a max age is stale for sure",
		applies: firstRead,
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: spec.HeartbeatMaxAge - ev.Heartbeat.FirstRead, Detail: fmt.Sprintf(
				"the value claims a time past the max age %s, on its worker's clock: stale if it is read unchanged for the max age, in %s; read for",
				spec.HeartbeatMaxAge, ev.Heartbeat.FirstRead.Round(time.Millisecond))})
			return j
		},
	},
	{
		Name: "heartbeat-missing", Section: SectionHeartbeat, Verdict: Ghost,
		When:    "no heartbeat, past the start grace",
		Why:     "workers write heartbeats with an expiry: a dead worker's key disappears, whether or not its name is still read",
		applies: heartbeatIs(HeartbeatMissing),
		note: func(spec Spec, _ Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, Reason{Source: SourceHeartbeat, Age: -1, Detail: fmt.Sprintf(
				"no heartbeat past the start grace %s: its worker stopped beating or never did, whether or not the name is read", spec.StartGrace)})
			return j
		},
	},
	{
		Name: "heartbeat-stale", Section: SectionHeartbeat, Verdict: Ghost,
		When:    "otherwise: the heartbeat is older than heartbeatMaxAgeSeconds",
		Why:     "a hung or dead worker, even while its pod runs and its name is read (a loop alive enough to XREADGROUP)",
		applies: always,
	},

	{
		Name: "read-recently", Section: SectionIdle, Verdict: Alive,
		When: "a read attempt within ghostIdleSeconds (before Redis 7.2: a read that delivered entries)",
		Why:  "some process uses the name",
		applies: func(spec Spec, ev Evidence) bool {
			return ev.Seen < spec.GhostIdle
		},
	},
	{
		Name: "idle-pods-unobserved", Section: SectionIdle, Verdict: Unknown,
		When:    "the kubernetes source cannot answer",
		Why:     "a pod that cannot be seen is not an absent pod",
		applies: podIs(PodUnobserved),
	},
	{
		Name: "pod-running", Section: SectionIdle, Verdict: Alive,
		When: "the kubernetes source sees the pod running or terminating",
		Why:  "idle time alone does not outweigh a pod: the worker may be busy with a long job",
		applies: func(spec Spec, ev Evidence) bool {
			return spec.Kubernetes && (ev.Pod.State == PodRunning || ev.Pod.State == PodTerminating)
		},
	},
	{
		Name: "idle-outage", Section: SectionIdle, Verdict: Unknown,
		When: "idle past ghostIdleSeconds, and the stream's node has been readable for less than ghostIdleSeconds " +
			"since a break pelwarden saw",
		Why:     "the worker could not read meanwhile",
		applies: func(_ Spec, ev Evidence) bool { return ev.IdleRecovering > 0 },
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, outageReason(SourceIdle, "ghostIdle", spec.GhostIdle, ev.IdleRecovering))
			return j
		},
	},
	{
		Name: "idle-writes-refused", Section: SectionIdle, Verdict: Unknown, gap: gapRefused,
		When: "idle past ghostIdleSeconds, and the stream's node refuses XREADGROUP with other writes (MISCONF, READONLY, " +
			"NOREPLICAS) or has accepted them again for less than ghostIdleSeconds",
		Why:     "the worker could not read meanwhile",
		applies: func(_ Spec, ev Evidence) bool { return ev.IdleRefused > 0 },
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.Reasons = append(j.Reasons, refusedReason(SourceIdle, "ghostIdle", spec.GhostIdle, ev.IdleRefused, ev.IdleRefusal))
			return j
		},
	},
	{
		Name: "idle-undecided", Section: SectionIdle, Verdict: Unknown,
		When: "idle past ghostIdleSeconds, holding entries, on a Redis before 7.2 (unless redis[].idleBefore72 is ghost)",
		Why:  "there idle counts from the last read that delivered: a worker polling an empty stream while it works looks dead",
		applies: func(_ Spec, ev Evidence) bool {
			return ev.IdleFromDeliveries && ev.Pending > 0 && !ev.IdleJudgesHolders
		},
		note: func(spec Spec, ev Evidence, j Judgement) Judgement {
			j.IdleUndecided = true
			j.Reasons = append(j.Reasons, Reason{Source: SourceIdle, Age: -1, Detail: fmt.Sprintf(
				"idle past ghostIdle %s, but this server counts idle from the last read that delivered entries, so a worker "+
					"polling an empty stream while it holds %d looks the same: not judged by idle alone (configure heartbeats, or "+
					"redis[].idleBefore72: ghost where workers never read while holding entries)", spec.GhostIdle, ev.Pending)})
			return j
		},
	},
	{
		Name: "idle-past", Section: SectionIdle, Verdict: Ghost,
		When:    "otherwise: idle past ghostIdleSeconds",
		Why:     "weak evidence of death, the only evidence there is",
		applies: always,
		note: func(spec Spec, _ Evidence, j Judgement) Judgement {
			j.Reasons[0].Detail += fmt.Sprintf(", past ghostIdle %s", spec.GhostIdle)
			return j
		},
	},
}
