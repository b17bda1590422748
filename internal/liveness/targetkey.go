package liveness

import "time"

// TargetKey is a target's identity as a comparable value: two targets have
// equal TargetKeys exactly when their Keys are equal, and none is built as
// a string, so a map keyed by it costs a poll no allocation.
type TargetKey struct{ k viewKey }

// Comparable returns t's TargetKey.
func (t Target) Comparable() TargetKey { return TargetKey{keyOf(t)} }

// Group is the group of the targets with key k.
func (k TargetKey) Group() GroupRef { return k.k.GroupRef }

// Target is a target whose key is k: its group and every setting its Key
// names, the settings of a source that is off (which keyOf leaves out)
// zero. So its Key, Spec.String and labels are those of every target with
// key k, and a holder keyed by k needs no copy of the target beside it.
func (k TargetKey) Target() Target {
	return Target{GroupRef: k.k.GroupRef, Spec: Spec{
		Idle: k.k.idle, Heartbeat: k.k.heartbeat, Kubernetes: k.k.kubernetes,
		GhostIdle: k.k.ghostIdle, HeartbeatKey: k.k.heartbeatKey, HeartbeatMaxAge: k.k.heartbeatMaxAge, StartGrace: k.k.startGrace,
		Owner:        OwnerMatch{mode: k.k.ownerMode, expr: k.k.ownerExpr},
		PodNamespace: k.k.podNamespace, PodSelector: k.k.podSelector, PodGrace: k.k.podGrace,
	}}
}

// viewKey is Target.Key as a comparable value: the view's map is looked up
// on every poll, and building the key string allocated on each. Two
// targets have equal viewKeys exactly when they have equal Keys.
type viewKey struct {
	GroupRef
	idle, heartbeat, kubernetes bool
	ghostIdle, heartbeatMaxAge  time.Duration
	startGrace, podGrace        time.Duration
	heartbeatKey                string
	ownerMode, ownerExpr        string
	podNamespace, podSelector   string
}

// keyOf leaves out, as Spec.String does, the settings of a source that is
// off: they change nothing about how the target is judged.
func keyOf(t Target) viewKey {
	s := t.Spec
	k := viewKey{
		GroupRef: t.GroupRef, idle: s.Idle, heartbeat: s.Heartbeat, kubernetes: s.Kubernetes,
		ghostIdle: s.GhostIdle, heartbeatMaxAge: s.HeartbeatMaxAge, heartbeatKey: s.HeartbeatKey,
		ownerMode: s.Owner.mode, ownerExpr: s.Owner.expr,
	}
	if k.ownerMode == "" {
		k.ownerMode = "exact"
	}
	if s.Heartbeat {
		k.startGrace = s.StartGrace
	}
	if s.Kubernetes {
		k.podNamespace, k.podSelector, k.podGrace = s.PodNamespace, s.PodSelector, s.PodGrace
	}
	return k
}

// readKey is what a target's Redis read depends on: its group, and the
// heartbeat keys it asks for (their pattern, and the owner match when the
// pattern names owners). Targets with equal readKeys share every read.
// Thresholds change how a read is judged, never what is read, and the
// idle source reads what every read reads anyway; the kubernetes source
// reads the pod caches, not Redis, and is added to each target's copy of
// the read (ViewOptions.Annotate). So a caller who varies a threshold, a
// pod selector or an owner match nothing reads by does not multiply the
// reads: only an operator's heartbeat key patterns and profiles do.
type readKey struct {
	GroupRef
	heartbeat    bool
	heartbeatKey string
	owner        OwnerMatch
}

func readKeyOf(t Target) readKey {
	k := readKey{GroupRef: t.GroupRef}
	if t.Spec.Heartbeat {
		k.heartbeat, k.heartbeatKey = true, t.Spec.HeartbeatKey
		if t.Spec.byOwner() {
			k.owner = t.Spec.Owner
			if k.owner.mode == "" {
				k.owner.mode = "exact"
			}
		}
	}
	return k
}

// target is what the fetcher is asked to read for k: the group, and of
// the spec only what changes the read.
func (k readKey) target() Target {
	return Target{GroupRef: k.GroupRef, Spec: Spec{Heartbeat: k.heartbeat, HeartbeatKey: k.heartbeatKey, Owner: k.owner}}
}
