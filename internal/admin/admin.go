// Package admin serves pelwarden's diagnostics and operator API,
// pelwarden.v1.Admin, from the same liveness view the scaler uses and
// through the same guarded scripts as the hygiene loop.
package admin

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/findings"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Options configures a Server.
type Options struct {
	View  *liveness.View
	Conns *redisx.Conns
	// Hygiene returns the target the hygiene loop looks after for a group;
	// nil means none.
	Hygiene func(conn, stream, group string) (hygiene.Target, bool)
	// Readers is what the hygiene loop saw of a group's readers claiming
	// entries; nil, or false, where it does not look after the group.
	Readers func(liveness.GroupRef) (findings.Readers, bool)
	// Provenance says where a group's hygiene settings came from and which
	// triggers were refused (internal/trigger); nil means nothing is known.
	Provenance func(liveness.GroupRef) (trigger.GroupView, bool)
	// CheckTrigger serves CheckTrigger; nil answers that every trigger is
	// admitted.
	CheckTrigger CheckFunc
	// Engine executes every change an operator or a worker asks for.
	Engine *reclaim.Engine
	// Events serves WatchEvents and the recent events of DescribeTarget;
	// nil gives a private bus.
	Events *events.Bus
	// Reports holds the values last reported to KEDA; nil gives an empty one.
	Reports *Reports
	// RequestTimeout bounds a fresh read of the view.
	RequestTimeout time.Duration
	Now            func() time.Time
	Log            *slog.Logger
}

// Server implements pelwardenv1.AdminServer.
type Server struct {
	pelwardenv1.UnimplementedAdminServer
	opts Options
	// heavy holds a slot per Plan, Findings, ListPending or dry-run
	// Reclaim call running: each can read whole PELs (Findings every
	// registered group's; one ListPending page's XPENDING IDLE scans the
	// PEL until its page is full), and they are open to whoever reaches
	// the port, so their Redis load is bounded by calls at once, like the
	// hygiene loop's by its workers.
	heavy chan struct{}
}

// maxHeavyCalls is how many Plan, Findings, ListPending and dry-run
// Reclaim calls run at once; one more is ResourceExhausted at once rather than queued behind
// them.
const maxHeavyCalls = 2

// heavyCall takes a slot for a Plan, Findings, ListPending or dry-run
// Reclaim call, or refuses it.
func (s *Server) heavyCall(method string) (release func(), err error) {
	select {
	case s.heavy <- struct{}{}:
		return func() { <-s.heavy }, nil
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "%s: %d Plan, Findings, ListPending and dry-run Reclaim calls are already running, at most %d run at once; retry shortly", method, maxHeavyCalls, maxHeavyCalls)
	}
}

// New returns an Admin server; View, Conns and Engine are required.
func New(opts Options) (*Server, error) {
	switch {
	case opts.View == nil:
		return nil, errors.New("admin: View is required")
	case opts.Conns == nil:
		return nil, errors.New("admin: Conns is required")
	case opts.Engine == nil:
		return nil, errors.New("admin: Engine is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Hygiene == nil {
		opts.Hygiene = func(string, string, string) (hygiene.Target, bool) { return hygiene.Target{}, false }
	}
	if opts.CheckTrigger == nil {
		opts.CheckTrigger = func(context.Context, string, map[string]string) CheckAnswer { return CheckAnswer{} }
	}
	if opts.Events == nil {
		opts.Events = events.NewBus(events.Options{}, prometheus.NewRegistry())
	}
	if opts.Reports == nil {
		opts.Reports = NewReports(0)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 3 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, heavy: make(chan struct{}, maxHeavyCalls)}, nil
}

// ListTargets returns every registered target with its latest snapshot.
func (s *Server) ListTargets(context.Context, *pelwardenv1.ListTargetsRequest) (*pelwardenv1.ListTargetsResponse, error) {
	latest := s.opts.View.Latest()
	slices.SortFunc(latest, func(a, b liveness.Latest) int {
		return cmp.Or(cmp.Compare(a.Target.Conn, b.Target.Conn), cmp.Compare(a.Target.Stream, b.Target.Stream),
			cmp.Compare(a.Target.Group, b.Target.Group), cmp.Compare(a.Target.Spec.String(), b.Target.Spec.String()))
	})
	out := &pelwardenv1.ListTargetsResponse{Targets: make([]*pelwardenv1.Target, 0, len(latest))}
	for _, l := range latest {
		out.Targets = append(out.Targets, s.target(l))
	}
	return out, nil
}

func (s *Server) target(l liveness.Latest) *pelwardenv1.Target {
	t := &pelwardenv1.Target{Redis: l.Target.Conn, Stream: l.Target.Stream, Group: l.Target.Group, Liveness: l.Target.Spec.String()}
	if l.Err != nil {
		t.Error = l.Err.Error()
	}
	snap := l.Snapshot
	if snap == nil {
		return t
	}
	t.SnapshotAgeMs = s.opts.Now().Sub(snap.At).Milliseconds()
	t.StreamMissing, t.GroupMissing = snap.StreamMissing, snap.GroupMissing
	t.LivePending, t.GhostPending, t.UnknownPending = snap.LivePending, snap.GhostPending, snap.UnknownPending
	t.DegradedPending, t.NoHeartbeatRecords, t.ReleasedPending = snap.DegradedPending, snap.NoHeartbeatRecords, snap.ReleasedPending
	t.Lag, t.LagEstimated = snap.Lag, snap.LagEstimated
	for _, c := range snap.Consumers {
		t.Consumers = append(t.Consumers, consumer(c, l.Target.Spec.Kubernetes))
	}
	return t
}

func consumer(c liveness.ConsumerView, pods bool) *pelwardenv1.Consumer {
	pc := &pelwardenv1.Consumer{
		Name: c.Name, Owner: c.Owner, Verdict: verdict(c.Verdict), Pending: c.Pending,
		IdleMs: c.Idle.Milliseconds(), InactiveMs: -1, HeartbeatAgeMs: -1, SharedName: c.SharedName,
	}
	if c.Inactive >= 0 {
		pc.InactiveMs = c.Inactive.Milliseconds()
	}
	if c.HeartbeatAge >= 0 {
		pc.HeartbeatAgeMs = c.HeartbeatAge.Milliseconds()
	}
	if pods {
		pc.Pod = c.Pod.String()
	}
	for _, r := range c.Reasons {
		pc.Reasons = append(pc.Reasons, r.String())
	}
	return pc
}

func verdict(v liveness.Verdict) pelwardenv1.Verdict {
	switch v {
	case liveness.Alive:
		return pelwardenv1.Verdict_VERDICT_ALIVE
	case liveness.Ghost:
		return pelwardenv1.Verdict_VERDICT_GHOST
	case liveness.Degraded:
		return pelwardenv1.Verdict_VERDICT_DEGRADED
	default:
		return pelwardenv1.Verdict_VERDICT_UNKNOWN
	}
}

// registered finds the view target for a group: the one the hygiene loop
// looks after, else the first registered one (by its liveness settings).
func (s *Server) registered(g liveness.GroupRef) (liveness.Target, bool) {
	if ht, ok := s.opts.Hygiene(g.Conn, g.Stream, g.Group); ok {
		return ht.Target, true
	}
	var found []liveness.Target
	for _, l := range s.opts.View.Latest() {
		if l.Target.Conn == g.Conn && l.Target.Stream == g.Stream && l.Target.Group == g.Group {
			found = append(found, l.Target)
		}
	}
	if len(found) == 0 {
		return liveness.Target{}, false
	}
	return slices.MinFunc(found, func(a, b liveness.Target) int { return cmp.Compare(a.Spec.String(), b.Spec.String()) }), true
}

func notRegistered(g liveness.GroupRef) error {
	return status.Errorf(codes.NotFound, "no target is registered for redis %q, stream %q, group %q: targets register when KEDA polls "+
		"a ScaledObject that names the group, or when hygiene.targets in pelwarden's configuration lists it", g.Conn, g.Stream, g.Group)
}

// settings returns the hygiene settings a group is acted on with: the
// loop's when it looks after the group, else the defaults of reclaim
// requeue; and whether the loop looks after it.
func (s *Server) settings(g liveness.GroupRef) (policy.Hygiene, bool) {
	if ht, ok := s.opts.Hygiene(g.Conn, g.Stream, g.Group); ok {
		return ht.Hygiene, true
	}
	return metadata.DefaultHygiene(g.Stream), false
}

// fresh reads the target now, under the request timeout.
func (s *Server) fresh(ctx context.Context, g liveness.GroupRef) (liveness.Target, *liveness.Snapshot, error) {
	lt, ok := s.registered(g)
	if !ok {
		return lt, nil, notRegistered(g)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	snap, err := s.opts.View.Refresh(ctx, lt)
	if err != nil {
		return lt, nil, rpcstatus.Of(err, g)
	}
	return lt, snap, nil
}

func (s *Server) client(g liveness.GroupRef) (redis.UniversalClient, error) {
	c, ok := s.opts.Conns.Get(g.Conn)
	return known(c, ok, g)
}

// diagnosticsClient is client for a read that judges nothing (ListPending's
// pages): it may read a replica where the connection allows replica reads.
func (s *Server) diagnosticsClient(g liveness.GroupRef) (redis.UniversalClient, error) {
	c, ok := s.opts.Conns.Diagnostics(g.Conn)
	return known(c, ok, g)
}

func known(c redis.UniversalClient, ok bool, g liveness.GroupRef) (redis.UniversalClient, error) {
	if !ok { // validation checked the name; a failure here is a wiring bug
		return nil, status.Errorf(codes.Internal, "no redis connection named %q", g.Conn)
	}
	return c, nil
}
