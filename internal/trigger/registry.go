// Package trigger is the trust boundary between KEDA trigger metadata and
// the hygiene loop. It admits each trigger against the operator's policy
// (config.Triggers: rules, profiles, floors, quotas and the global caps'
// shares), remembers what every admitted trigger asks of its group, and
// hands the loop the most conservative settings of all of them, with
// where each setting came from and when the group may first act.
package trigger

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Enrollment is what the registry hands the hygiene loop for a group.
type Enrollment struct {
	Target  liveness.Target
	Hygiene policy.Hygiene
	// Permanent marks a target of hygiene.targets.
	Permanent bool
	// ActFrom is when the group's hygiene may first act: zero for
	// hygiene.targets; for a group of triggers, triggers.warmUp after
	// pelwarden started and after the group's triggers or their merged
	// settings last changed.
	ActFrom time.Time
	// WarmUp says why the group waits until ActFrom (a *WarmUp); nil for
	// hygiene.targets.
	WarmUp fmt.Stringer
}

// EnrollFunc hands a group's effective settings to the hygiene loop. An
// error (the loop is full) refuses the trigger that caused the call.
type EnrollFunc func(Enrollment) error

// Options configures a Registry.
type Options struct {
	Policy config.Triggers
	// Shares are the global caps on what triggers hold, and the
	// namespaces with reservations in them; each namespace may also have
	// at most four triggers per scaler target of its quota.
	Shares config.TriggerShares
	// Expiry forgets a trigger that no request has named for this long
	// (scaler.targetIdleExpiry).
	Expiry time.Duration
	Enroll EnrollFunc
	Log    *slog.Logger
	Now    func() time.Time
}

// ID is one trigger: its ScaledObject and a hash of its metadata, since
// one ScaledObject may have several triggers.
type ID struct {
	Namespace, Name string
	Hash            uint64
}

// seed keys the metadata hash of every ID in the process. It is random, so
// a caller cannot choose metadata whose hashes collide.
var seed = maphash.MakeSeed()

// IDOf identifies a trigger, whatever the order of its metadata keys, by
// summing one hash per key and value pair: no sorted copy, no allocation.
// A scaler poll computes it once, for its parse cache and for Admit. A
// secret key (metadata.IsSecret) is hashed by name only: the ID is kept,
// and a hash of a password is a way to test guesses of it.
func IDOf(namespace, name string, md map[string]string) ID {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(seed)
	for k, v := range md {
		h.Reset()
		h.WriteString(k)
		if !metadata.IsSecret(k) {
			h.WriteByte(0)
			h.WriteString(v)
		}
		sum += h.Sum64()
	}
	return ID{Namespace: namespace, Name: name, Hash: sum}
}

func (id ID) from() string { return "trigger " + id.Namespace + "/" + id.Name }

type entry struct {
	id       ID
	req      *metadata.Request // shared with the parse cache; never written to
	key      string            // the view target's key, for the scaler quota
	lastSeen time.Time
	// hygiene says the trigger is a member of its group; counted says it
	// counts against its namespace's hygiene quota.
	hygiene, counted bool
	refusal          *Refusal
}

type group struct {
	// config is the hygiene.targets entry of the group, if any: it wins
	// over every trigger.
	config *Member
	// members are the admitted triggers naming the group: mostly one or
	// two, so a slice, not a map.
	members []*entry
	pushed  time.Time
	// settings is the members and merged settings last pushed; warm is
	// when and why they last changed, which starts the warm-up again (nil
	// before the first push).
	settings signature
	warm     *WarmUp
}

// space is what one namespace holds: view targets and hygiene groups, each
// with the number of its triggers that name it.
type space struct {
	triggers int
	targets  map[string]int
	groups   map[liveness.GroupRef]int
}

// Registry admits triggers and merges their hygiene settings.
type Registry struct {
	opts    Options
	rules   rules
	refused map[codes.Code]prometheus.Counter
	// started is when the registry began: after a start every trigger
	// must poll once before a group it names acts.
	started time.Time

	mu      sync.Mutex
	entries map[ID]*entry
	groups  map[liveness.GroupRef]*group
	spaces  map[string]*space
	caps    caps
}

// New returns a Registry; its metrics are registered on reg.
func New(opts Options, reg prometheus.Registerer) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pelwarden_trigger_hygiene_refused_total",
		Help: "Requests whose hygiene keys the trigger policy refused, by the gRPC code a caller would get; the metric was answered.",
	}, []string{"code"})
	reg.MustRegister(vec)
	refused := map[codes.Code]prometheus.Counter{}
	for _, c := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied, codes.ResourceExhausted} {
		refused[c] = vec.WithLabelValues(c.String())
	}
	return &Registry{
		opts: opts, rules: rules(opts.Policy.Rules), refused: refused, started: opts.Now(),
		entries: map[ID]*entry{}, groups: map[liveness.GroupRef]*group{}, spaces: map[string]*space{},
		caps: newCaps(opts.Shares, opts.Policy.Quotas),
	}
}

// AddConfig registers hygiene.targets[index]: its group is scanned with
// exactly these settings, whatever triggers ask.
func (g *Registry) AddConfig(index int, r metadata.Request) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := g.group(r.Target.GroupRef)
	grp.config = &Member{From: fmt.Sprintf("hygiene.targets[%d]", index), Target: r.Target, Hygiene: r.Hygiene}
	return g.push(grp, g.opts.Now(), "")
}

// Admit is told of every ExternalScaler request after its metadata parsed.
// It returns an error only for what refuses the metric too: a connection,
// profile or heartbeat key the namespace may not use, or a full quota or
// share. A refused hygiene request
// is remembered for DescribeTarget, counted and logged, and the metric is
// answered as if the trigger had not asked. A known trigger costs a map
// lookup. id is IDOf the request's trigger.
func (g *Registry) Admit(id ID, r *metadata.Request) error {
	now := g.opts.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.entries[id]; ok {
		e.lastSeen = now
		if e.refusal != nil {
			g.refused[e.refusal.Code].Inc()
		}
		if grp := g.groups[e.req.Target.GroupRef]; e.hygiene && grp.config == nil && now.Sub(grp.pushed) > g.opts.Expiry/8 {
			_ = g.push(grp, now, "") // keeps the loop's target from expiring; the settings are unchanged
		}
		return nil
	}
	return g.admit(id, r, now)
}

// Holders says who holds each target: for a scaler target of triggers,
// the first namespace in name order of the triggers naming it; and which
// targets are hygiene.targets', the operator's. /metrics shows a target's
// series by it.
func (g *Registry) Holders() (namespaces map[string]string, operator map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	namespaces = map[string]string{}
	for ns, sp := range g.spaces {
		for key := range sp.targets {
			if held, ok := namespaces[key]; !ok || ns < held {
				namespaces[key] = ns
			}
		}
	}
	operator = map[string]bool{}
	for _, grp := range g.groups {
		if grp.config != nil {
			operator[grp.config.Target.Key()] = true
		}
	}
	return namespaces, operator
}

// Admitted says the trigger id is admitted: its metric is served.
func (g *Registry) Admitted(id ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.entries[id]
	return ok
}

func (g *Registry) admit(id ID, r *metadata.Request, now time.Time) error {
	ns, q := id.Namespace, g.opts.Policy.Quotas
	if denied := g.reach(ns, r); denied != nil {
		return denied
	}
	sp := g.spaces[ns]
	if sp == nil {
		sp = &space{targets: map[string]int{}, groups: map[liveness.GroupRef]int{}}
	}
	key := r.Target.Key()
	newTarget := sp.targets[key] == 0
	switch {
	case newTarget && len(sp.targets) >= q.ScalerTargets:
		return &Refusal{Code: codes.ResourceExhausted, Rule: fmt.Sprintf("namespace %q already has %d scaler targets (triggers.quotas.scalerTargets)", ns, len(sp.targets))}
	case newTarget && !g.caps.targets.fits(ns, len(sp.targets)):
		return &Refusal{Code: codes.ResourceExhausted, Rule: fmt.Sprintf("the %d scaler targets triggers may hold (scaler.maxTargets less what the hygiene loop holds) are taken, but for those reserved for namespaces triggers.rules name literally; they are forgotten after scaler.targetIdleExpiry", g.opts.Shares.ScalerTargets)}
	case sp.triggers >= 4*q.ScalerTargets || !g.caps.triggers.fits(ns, sp.triggers):
		return &Refusal{Code: codes.ResourceExhausted, Rule: fmt.Sprintf("too many distinct triggers (namespace %q has %d); they are forgotten after scaler.targetIdleExpiry", ns, sp.triggers)}
	}
	g.spaces[ns] = sp
	e := &entry{id: id, req: r, key: key, lastSeen: now}
	g.entries[id] = e
	g.caps.triggers.take(ns, sp.triggers)
	sp.triggers++
	if newTarget {
		g.caps.targets.take(ns, len(sp.targets))
	}
	sp.targets[key]++
	if len(r.Credentials) > 0 {
		// Once per trigger, as a refused hygiene request is: again only
		// after the registry forgot it.
		g.opts.Log.Warn("trigger metadata carries Redis credentials that KEDA sent in clear text; pelwarden never uses them",
			"namespace", ns, "scaledObject", id.Name, "target", r.Target.String(), "keys", r.Credentials,
			"advice", metadata.CredentialAdvice(r.Credentials))
	}
	if r.HygieneErr != nil || r.Hygiene.Mode != policy.ReclaimOff {
		g.enroll(e, sp, now, false)
	}
	return nil
}

// enroll admits e's hygiene request, or records why not; a retry that is
// refused again is neither counted nor logged again.
func (g *Registry) enroll(e *entry, sp *space, now time.Time, retry bool) {
	e.refusal = g.check(e)
	ref, ns := e.req.Target.GroupRef, e.id.Namespace
	grp := g.groups[ref]
	if e.refusal == nil && (grp == nil || grp.config == nil) && sp.groups[ref] == 0 {
		switch {
		case len(sp.groups) >= g.opts.Policy.Quotas.HygieneTargets:
			e.refusal = &Refusal{Code: codes.ResourceExhausted, Rule: fmt.Sprintf("namespace %q already has %d hygiene targets (triggers.quotas.hygieneTargets)", ns, len(sp.groups))}
		case !g.caps.groups.fits(ns, len(sp.groups)):
			e.refusal = &Refusal{Code: codes.ResourceExhausted, Rule: fmt.Sprintf("the %d groups triggers may enroll (hygiene.maxTargets less hygiene.targets) are taken, but for those reserved for namespaces triggers.rules name literally", g.opts.Shares.HygieneTargets)}
		}
	}
	if e.refusal == nil {
		grp = g.group(ref)
		if !slices.Contains(grp.members, e) {
			grp.members = append(grp.members, e)
		}
		e.hygiene = true
		if grp.config == nil {
			e.counted = true
			if sp.groups[ref] == 0 {
				g.caps.groups.take(ns, len(sp.groups))
			}
			sp.groups[ref]++
			if err := g.push(grp, now, e.id.from()+" joined"); err != nil {
				g.leave(e, sp, now)
				e.refusal = &Refusal{Code: codes.ResourceExhausted, Rule: err.Error()}
			}
		}
	}
	if e.refusal != nil && !retry {
		g.refused[e.refusal.Code].Inc()
		g.opts.Log.Warn("trigger hygiene refused; its metric is served", "namespace", e.id.Namespace, "scaledObject", e.id.Name,
			"target", ref.String(), "code", e.refusal.Code.String(), "err", e.refusal.Error())
	}
}

// check applies the policy to a trigger's hygiene request.
func (g *Registry) check(e *entry) *Refusal {
	r, p := e.req, g.opts.Policy
	if r.HygieneErr != nil {
		return &Refusal{Code: codes.InvalidArgument, Key: r.HygieneErr.Key, Rule: r.HygieneErr.Accepted}
	}
	if p.Reclaim != policy.ReclaimRequeue {
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.KeyReclaim, Rule: "trigger-driven hygiene is off (triggers.reclaim: off); list the group in hygiene.targets, or ask the operator to allow it"}
	}
	// ParseTrigger has checked this already; checked again here so that
	// no parse path can hand the loop a config-only setting.
	var me *metadata.Error
	if err := metadata.CheckTriggerHygiene(r.Hygiene, r.Target.Stream); errors.As(err, &me) {
		return &Refusal{Code: codes.InvalidArgument, Key: me.Key, Rule: me.Accepted}
	}
	if r.Profile == "" {
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.ProfileKey, Rule: "is required with reclaim: a trigger's hygiene judges liveness by a profile of triggers.profiles that triggers.rules[].profiles lets the namespace name; its own liveness keys serve its metric only"}
	}
	if refusal := floors(p.Floors, r); refusal != nil {
		return refusal
	}
	if !g.rules.enrolls(e.id.Namespace, r.Target.Conn, r.Target.Stream) {
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.KeyStream, Rule: fmt.Sprintf("namespace %q may not enroll stream %q of connection %q in hygiene: no triggers.rules entry's hygieneStreams matches it", e.id.Namespace, r.Target.Stream, r.Target.Conn)}
	}
	return nil
}

// floors holds every threshold the trigger's settings use to the floors,
// whatever its liveness list says, and its dead-lettering to
// triggers.floors.maxDeliveries. A profile is checked against the floors
// when the configuration loads; checked again here so that no way of
// making a request reaches the loop below a floor.
func floors(f config.TriggerFloors, r *metadata.Request) *Refusal {
	ths := append([]config.Threshold{{Key: metadata.KeyEntryStaleSeconds, Floor: "entryStale", Value: r.Hygiene.EntryStale, Min: f.EntryStale}},
		f.Thresholds(r.Target.Spec)...)
	for _, th := range ths {
		if th.Value < th.Min {
			return &Refusal{Code: codes.InvalidArgument, Key: th.Key, Rule: fmt.Sprintf("must be at least %s for a trigger that asks for reclaim (triggers.floors.%s), got %s", seconds(th.Min), th.Floor, seconds(th.Value))}
		}
	}
	if n := r.Hygiene.MaxDeliveries; n != 0 && n < f.MaxDeliveries {
		return &Refusal{Code: codes.InvalidArgument, Key: metadata.KeyMaxDeliveries, Rule: fmt.Sprintf("must be 0 (never dead-letter) or at least %d for a trigger (triggers.floors.maxDeliveries), got %d", f.MaxDeliveries, n)}
	}
	return nil
}

func (g *Registry) group(ref liveness.GroupRef) *group {
	grp := g.groups[ref]
	if grp == nil {
		grp = &group{}
		g.groups[ref] = grp
	}
	return grp
}

// merged is a group's settings, merged from its members. It is worked
// out on demand rather than kept: a group is pushed once per change, and
// described only when asked.
func (grp *group) merged() Effective {
	members := make([]Member, 0, len(grp.members))
	if grp.config != nil {
		members = append(members, *grp.config)
	} else {
		for _, e := range grp.members {
			members = append(members, Member{From: e.id.from(), Tie: e.id.Hash, Target: e.req.Target, Hygiene: e.req.Hygiene})
		}
	}
	return Merge(members)
}

// push merges a group's settings and hands them to the loop. why says
// what changed, if anything did: a change of the members or of the merged
// settings starts the group's warm-up again.
func (g *Registry) push(grp *group, now time.Time, why string) error {
	eff := grp.merged()
	grp.pushed = now
	en := Enrollment{Target: eff.Target, Hygiene: eff.Hygiene, Permanent: grp.config != nil}
	if grp.config == nil {
		if s := grp.signature(eff); grp.warm == nil || s != grp.settings {
			grp.settings = s
			grp.warm = &WarmUp{why: cmp.Or(why, "the merged settings changed"), changed: now, started: g.started, period: g.opts.Policy.WarmUp}
		}
		en.ActFrom, en.WarmUp = grp.warm.changed.Add(grp.warm.period), grp.warm
	}
	return g.opts.Enroll(en)
}

// leave takes e out of its group, which is merged again without it; a
// group with no member left is forgotten here and expires in the loop.
func (g *Registry) leave(e *entry, sp *space, now time.Time) {
	if !e.hygiene {
		return
	}
	ref := e.req.Target.GroupRef
	grp := g.groups[ref]
	grp.members = slices.DeleteFunc(grp.members, func(m *entry) bool { return m == e })
	e.hygiene = false
	if e.counted {
		e.counted = false
		if sp.groups[ref]--; sp.groups[ref] == 0 {
			g.caps.groups.give(e.id.Namespace, len(sp.groups))
			delete(sp.groups, ref)
		}
	}
	switch {
	case grp.config != nil:
	case len(grp.members) == 0:
		delete(g.groups, ref)
	default:
		_ = g.push(grp, now, e.id.from()+" left")
	}
}
