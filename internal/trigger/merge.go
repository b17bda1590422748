package trigger

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Member is one source of hygiene settings for a group: an admitted
// trigger, or an entry of hygiene.targets.
type Member struct {
	// From names the source: "trigger <namespace>/<name>" or
	// "hygiene.targets[<i>]".
	From string
	// Tie orders members with the same From (several triggers of one
	// ScaledObject), so the merge never depends on arrival order.
	Tie     uint64
	Target  liveness.Target
	Hygiene policy.Hygiene
}

// Setting says which source a merged setting came from.
type Setting struct {
	// Name is the metadata key of the setting.
	Name  string
	Value string
	From  string
}

// Effective is the settings a group is scanned with and where each came
// from.
type Effective struct {
	Target  liveness.Target
	Hygiene policy.Hygiene
	// Sources lists each setting that triggers may disagree about, with
	// the source that decided it.
	Sources []Setting
	// Conflict, when set, says why the merge forced a dry run: the
	// triggers judge liveness in different ways, and no way of combining
	// them is safe.
	Conflict string
}

// Merge gives the most conservative settings of members, whatever order
// they came in:
//   - the longest entry staleness, ghost idle time, heartbeat max age, start
//     grace and pod deletion grace;
//   - dead-lettering only if every member dead-letters, after the most
//     deliveries any of them allows (0, never, wins);
//   - a hard timeout only if every member has one, the longest;
//   - deleting ghost consumers or originals only if every member does;
//   - a dry run if any member asks for one;
//   - claim only if every member claims (else requeue);
//   - the liveness sources, heartbeat key, owner match and pod selector of
//     all members must agree: if they do not, the group gets a dry run,
//     because no combination of two ways to tell life is safe for both.
//
// Settings only the configuration may set (carry field, dead-letter
// stream, claim fallback) are taken from the first member in From order;
// triggers cannot change them from their defaults.
func Merge(members []Member) Effective {
	if len(members) == 0 {
		return Effective{}
	}
	ms := slices.SortedFunc(slices.Values(members), func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Tie, b.Tie))
	})
	first := ms[0]
	e := Effective{Target: first.Target, Hygiene: first.Hygiene}
	for _, m := range ms[1:] {
		if shape(m.Target.Spec) != shape(first.Target.Spec) {
			e.Conflict = "liveness settings differ between " + first.From + " and " + m.From + "; scanning as a dry run until they agree"
		}
	}
	s := &e.Target.Spec
	h := &e.Hygiene
	e.Sources = []Setting{
		longest(ms, "entryStaleSeconds", &h.EntryStale, func(m Member) time.Duration { return m.Hygiene.EntryStale }),
		longest(ms, "ghostIdleSeconds", &s.GhostIdle, func(m Member) time.Duration { return m.Target.Spec.GhostIdle }),
		longest(ms, "heartbeatMaxAgeSeconds", &s.HeartbeatMaxAge, func(m Member) time.Duration { return m.Target.Spec.HeartbeatMaxAge }),
		longest(ms, "heartbeatStartGraceSeconds", &s.StartGrace, func(m Member) time.Duration { return m.Target.Spec.StartGrace }),
		longest(ms, "podDeletionGraceSeconds", &s.PodGrace, func(m Member) time.Duration { return m.Target.Spec.PodGrace }),
		offWins(ms, "hardTimeoutSeconds", &h.HardTimeout, func(m Member) time.Duration { return m.Hygiene.HardTimeout }),
		offWins(ms, "maxDeliveries", &h.MaxDeliveries, func(m Member) int64 { return m.Hygiene.MaxDeliveries }),
		all(ms, "deleteGhostConsumers", &h.DeleteGhostConsumers, func(m Member) bool { return m.Hygiene.DeleteGhostConsumers }),
		all(ms, "deleteOriginal", &h.DeleteOriginal, func(m Member) bool { return m.Hygiene.DeleteOriginal }),
		mode(ms, &h.Mode),
	}
	dry := anyOf(ms, "dryRun", &h.DryRun, func(m Member) bool { return m.Hygiene.DryRun })
	if h.MaxDeliveries == 0 {
		h.DeadLetterStream = ""
	}
	if e.Conflict != "" {
		h.DryRun = true
		dry = Setting{Name: "dryRun", Value: "true", From: "conflicting liveness settings"}
	}
	e.Sources = append(e.Sources, dry)
	for _, src := range []struct{ name, value string }{
		{"liveness", sources(first.Target.Spec)}, {"heartbeatKey", first.Target.Spec.HeartbeatKey},
		{"ownerMatch", first.Target.Spec.Owner.String()}, {"deliveryCountField", h.DeliveryCountField},
		{"deadLetterStream", h.DeadLetterStream},
	} {
		e.Sources = append(e.Sources, Setting{Name: src.name, Value: src.value, From: first.From})
	}
	return e
}

// shape is the part of a liveness spec that says how life is told, as
// opposed to how long to wait: it cannot be merged by taking a maximum.
func shape(s liveness.Spec) string {
	return sources(s) + "|" + s.HeartbeatKey + "|" + s.Owner.String() + "|" + s.PodNamespace + "|" + s.PodSelector
}

func sources(s liveness.Spec) string {
	out := ""
	for _, src := range []struct {
		on   bool
		name liveness.Source
	}{{s.Idle, liveness.SourceIdle}, {s.Heartbeat, liveness.SourceHeartbeat}, {s.Kubernetes, liveness.SourceKubernetes}} {
		if src.on {
			if out != "" {
				out += ","
			}
			out += string(src.name)
		}
	}
	return out
}

func longest(ms []Member, name string, dst *time.Duration, get func(Member) time.Duration) Setting {
	from := ms[0].From
	*dst = get(ms[0])
	for _, m := range ms[1:] {
		if v := get(m); v > *dst {
			*dst, from = v, m.From
		}
	}
	return Setting{Name: name, Value: seconds(*dst), From: from}
}

// offWins is the largest value, where 0 means off (never) and wins.
func offWins[T time.Duration | int64](ms []Member, name string, dst *T, get func(Member) T) Setting {
	from := ms[0].From
	*dst = get(ms[0])
	for _, m := range ms[1:] {
		v := get(m)
		if *dst != 0 && (v == 0 || v > *dst) {
			*dst, from = v, m.From
		}
	}
	value := strconv.FormatInt(int64(*dst), 10)
	if d, ok := any(*dst).(time.Duration); ok {
		value = seconds(d)
	}
	return Setting{Name: name, Value: value, From: from}
}

func all(ms []Member, name string, dst *bool, get func(Member) bool) Setting {
	for _, m := range ms {
		if !get(m) {
			*dst = false
			return Setting{Name: name, Value: "false", From: m.From}
		}
	}
	*dst = true
	return Setting{Name: name, Value: "true", From: ms[0].From}
}

func anyOf(ms []Member, name string, dst *bool, get func(Member) bool) Setting {
	for _, m := range ms {
		if get(m) {
			*dst = true
			return Setting{Name: name, Value: "true", From: m.From}
		}
	}
	*dst = false
	return Setting{Name: name, Value: "false", From: ms[0].From}
}

// mode is claim only if every member claims; a member that requeues wins,
// since requeue takes nothing to a consumer that may be busy.
func mode(ms []Member, dst *policy.ReclaimMode) Setting {
	*dst = ms[0].Hygiene.Mode
	from := ms[0].From
	for _, m := range ms {
		if m.Hygiene.Mode == policy.ReclaimRequeue {
			*dst, from = policy.ReclaimRequeue, m.From
			break
		}
	}
	return Setting{Name: "reclaim", Value: string(*dst), From: from}
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}
