// Package scaler serves KEDA's ExternalScaler contract from the shared
// liveness view: the numbers it reports leave out ghost-held entries.
package scaler

import (
	"context"
	"log/slog"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// Options configures a Server.
type Options struct {
	// Env is what trigger metadata is checked against: the configured Redis
	// connections, and whether the kubernetes source is available. Its
	// Namespace is ignored; each request's ScaledObject namespace is used.
	Env metadata.Env
	// RequestTimeout is pelwarden's own deadline for reaching Redis; KEDA
	// sets none.
	RequestTimeout time.Duration
	// ResendInterval is how often StreamIsActive repeats its answer, and
	// StreamMetricSpec looks again at a refused trigger; below 1,
	// DefaultResendInterval.
	ResendInterval time.Duration
	// Arm wakes StreamIsActive on a new entry; nil leaves the stream's
	// resends to see it.
	Arm ArmFunc
	// MaxActiveStreams bounds the StreamIsActive streams open at once, and
	// MaxActiveStreamsPerNamespace those of one ScaledObject namespace;
	// one more is ResourceExhausted. 0 is no bound.
	MaxActiveStreams, MaxActiveStreamsPerNamespace int
	// MaxActiveTargetsPerGroup bounds the targets of one group with a
	// StreamIsActive stream open; one more is ResourceExhausted. 0 is no
	// bound.
	MaxActiveTargetsPerGroup int
	// Refused, when set, is told of every GetMetricSpec answered with the
	// placeholder spec, with the refusal it stands for, so that it is
	// logged and counted as a refusal although the call succeeded.
	Refused func(ctx context.Context, refusal error)
	// OnPlaceholder, when set, is told of a GetMetrics that asks for the
	// placeholder metric of a trigger pelwarden now serves: an HPA that
	// KEDA built while the trigger was refused and has not rebuilt.
	OnPlaceholder func(namespace, name string)
	// Reported, when set, is told every value GetMetrics reports, under the
	// metric name KEDA asked for.
	Reported func(r metadata.Request, metricName string, value int64)
	// Admit, when set, is told of every request after its metadata parsed,
	// with the trigger's ID (internal/trigger): it enrolls the targets whose
	// metadata asks for reclaim, within the operator's policy. Its error
	// refuses the request; a refused hygiene request is not an error, so
	// the metric is served.
	Admit func(id trigger.ID, r *metadata.Request) error
	// Parse, when set, replaces the parse of trigger metadata against Env.
	// It must be pure: its results, errors included, are cached.
	Parse ParseFunc
	// ParseCacheSize bounds the number of triggers whose parse is kept;
	// below 1 keeps one.
	ParseCacheSize int
	// ParseCacheBytes bounds the memory of the parses kept; 0 means
	// DefaultParseCacheBytes.
	ParseCacheBytes int64
	Log             *slog.Logger
}

// DefaultResendInterval is Options.ResendInterval when none is given:
// scaler.activeResendInterval's default.
const DefaultResendInterval = 5 * time.Second

// Server implements externalscaler.ExternalScalerServer.
type Server struct {
	externalscaler.UnimplementedExternalScalerServer
	view    *liveness.View
	opts    Options
	parsed  *parseCache
	streams *streamQuota
	// specStreams bounds StreamMetricSpec's streams as streams bounds
	// StreamIsActive's: each holds a goroutine while it is open.
	specStreams *streamQuota
	active      *activeTargets
}

// New returns a Server reading from view.
func New(view *liveness.View, opts Options) *Server {
	if opts.ResendInterval <= 0 {
		opts.ResendInterval = DefaultResendInterval
	}
	s := &Server{view: view, opts: opts,
		streams:     newStreamQuota("StreamIsActive", opts.MaxActiveStreams, opts.MaxActiveStreamsPerNamespace),
		specStreams: newStreamQuota("StreamMetricSpec", opts.MaxActiveStreams, opts.MaxActiveStreamsPerNamespace)}
	s.active = newActiveTargets(s)
	parse := opts.Parse
	if parse == nil {
		parse = s.parseMetadata
	}
	bytes := opts.ParseCacheBytes
	if bytes == 0 {
		bytes = DefaultParseCacheBytes
	}
	s.parsed = newParseCache(parse, opts.ParseCacheSize, bytes)
	return s
}

// GetMetricSpec reports the metric and its per-replica target. It needs no
// Redis: the target comes from metadata.
//
// A trigger refused for what it says (InvalidArgument, PermissionDenied)
// is answered with a spec rather than the refusal: KEDA drops a
// GetMetricSpec error into its operator's log and reports only that no
// scaler returned a spec, so the ScaledObject's owner would never see
// why. With a spec KEDA builds the HPA and starts its scale loop, whose
// GetMetrics and IsActive get the refusal and show its text as
// KEDAScalerFailed events. The spec is the trigger's own where its
// metadata parsed and only the operator's configuration refuses it (the
// trigger policy, the connection its keys are held to): once a new
// configuration admits it, the HPA already asks for the right metric, and
// KEDA need rebuild nothing. Metadata that does not parse gets the
// placeholder (RefusedMetricName); fixing it changes the ScaledObject,
// and KEDA rebuilds the HPA. Bounds, caps and Redis errors stay errors: a
// cap is transient, and KEDA's retry must then get the real spec.
func (s *Server) GetMetricSpec(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	spec, refusal, err := s.spec(ref)
	if refusal != nil && s.opts.Refused != nil {
		s.opts.Refused(ctx, refusal)
	}
	return spec, err
}

// spec is the spec GetMetricSpec answers for a checked ref, with the
// refusal it stands for when the trigger is refused.
func (s *Server) spec(ref *externalscaler.ScaledObjectRef) (spec *externalscaler.GetMetricSpecResponse, refusal, err error) {
	r, id, err := s.parsed.get(ref)
	if err == nil {
		if err = s.check(ref, r, id); err == nil {
			return metricSpec(*r), nil, nil
		}
		spec = metricSpec(*r)
	} else {
		spec = refusedSpec()
	}
	if c := status.Code(err); c != codes.InvalidArgument && c != codes.PermissionDenied {
		return nil, nil, err
	}
	return spec, err, nil
}

// GetMetrics reports the metric value from the target's snapshot. A Redis
// failure is Unavailable, never a zero that would scale workers away.
func (s *Server) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	if err := metadata.CheckMetricName(req.GetMetricName()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r, _, err := s.parse(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	// The placeholder's target of 1 was never this trigger's: served, a
	// trigger that parses now would scale one replica per entry.
	if IsRefusedMetric(req.GetMetricName()) {
		if s.opts.OnPlaceholder != nil {
			s.opts.OnPlaceholder(req.GetScaledObjectRef().GetNamespace(), req.GetScaledObjectRef().GetName())
		}
		return nil, status.Error(codes.FailedPrecondition, "metric "+RefusedMetricName+" is a placeholder: the HPA was made while pelwarden refused this trigger, "+
			"which it serves now; re-apply or touch the ScaledObject so KEDA asks GetMetricSpec again")
	}
	snap, err := s.poll(ctx, r)
	if err != nil {
		return nil, err
	}
	v := policy.Value(r.Metric, snap)
	name := req.GetMetricName()
	if name == "" {
		name = r.MetricName
	}
	if s.opts.Reported != nil {
		s.opts.Reported(r, name, v)
	}
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName: name, MetricValue: v, MetricValueFloat: float64(v),
	}}}, nil
}

// IsActive answers from the same snapshot GetMetrics used on this poll.
func (s *Server) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	r, _, err := s.parse(ref)
	if err != nil {
		return nil, err
	}
	snap, err := s.poll(ctx, r)
	if err != nil {
		return nil, err
	}
	return &externalscaler.IsActiveResponse{Result: policy.Active(policy.Value(r.Metric, snap), r.Activation)}, nil
}

// StreamIsActive pushes the activity of a target: at once when the stream
// is opened, as soon as it changes, and again every ResendInterval, from
// a read within the view's freshness. The
// streams of one target share one goroutine that reads it and decides
// every stream's answer from each read (activeTargets): while an answer is
// false it holds the Redis stream's armed watch, so the first XADD is seen
// within a round trip instead of at the next refresh, and a stream's own
// goroutine wakes only to send. An XADD costs Redis a few commands per
// stream and per target, and pelwarden one wake per target, never per
// caller.
func (s *Server) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.IsActiveResponse]) error {
	opened := time.Now()
	r, id, err := s.parse(ref)
	if err != nil {
		return err
	}
	release, err := s.streams.take(ref.GetNamespace())
	if err != nil {
		return err
	}
	defer release()
	ctx := stream.Context()
	t, ans, leave, err := s.active.join(r)
	if err != nil {
		return err
	}
	defer leave()
	// The first answer comes from a read begun after the opening.
	if t.answerSince(ctx, ans, opened) != nil {
		return nil // the stream ended
	}
	resend := time.NewTicker(s.opts.ResendInterval)
	defer resend.Stop()
	var sent, last bool
	force := true
	for {
		active, changed, err := t.state(ans)
		if err != nil {
			return err
		}
		if force || active != last || !sent {
			if err := stream.Send(&externalscaler.IsActiveResponse{Result: active}); err != nil {
				return err
			}
			sent, last, force = true, active, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resend.C:
			// An open stream is a request too: with external-push at zero
			// replicas KEDA sends nothing else, and hygiene must go on. Its
			// answer comes from a read begun within the view's freshness,
			// as a poll's does: nothing else may read the group.
			if err := s.admit(id, &r); err != nil {
				return err
			}
			if t.answerSince(ctx, ans, time.Now().Add(-s.view.Freshness())) != nil {
				return nil // the stream ended
			}
			force = true
		}
		s.active.wakes.Add(1)
	}
}

// OpenStreams is the number of StreamIsActive streams open.
func (s *Server) OpenStreams() int { return s.streams.Open() }

// StreamMetricSpec sends the spec GetMetricSpec answers, once: KEDA's
// operator keeps the spec a push trigger's stream sent, and rebuilds the
// HPA on a new one. A spec derives from the trigger's metadata alone, so
// it never changes while the stream is open; a refused trigger is sent
// its own spec or the placeholder, as GetMetricSpec answers it. A trigger
// refused for a cap (ResourceExhausted), or while Redis cannot be reached
// to check it, is sent nothing yet: it is looked at again every
// ResendInterval, and its spec is sent once it is served, with nobody
// touching the ScaledObject.
func (s *Server) StreamMetricSpec(ref *externalscaler.ScaledObjectRef, stream grpc.ServerStreamingServer[externalscaler.GetMetricSpecResponse]) error {
	if err := checkRef(ref); err != nil {
		return err
	}
	release, err := s.specStreams.take(ref.GetNamespace())
	if err != nil {
		return err
	}
	defer release()
	ctx := stream.Context()
	recheck := time.NewTicker(s.opts.ResendInterval)
	defer recheck.Stop()
	for {
		spec, refusal, err := s.spec(ref)
		if c := status.Code(err); err != nil && c != codes.ResourceExhausted && c != codes.Unavailable {
			return err
		}
		if spec != nil {
			if refusal != nil && s.opts.Refused != nil {
				s.opts.Refused(ctx, refusal)
			}
			if err := stream.Send(spec); err != nil {
				return err
			}
			recheck.Stop()
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-recheck.C:
		}
	}
}

// parse returns the request of a trigger, parsed once and then cached, and
// its ID, and admits it on every call: the trigger registry counts a
// trigger as wanted for as long as KEDA keeps asking about it. Every
// handler calls it first: the bounds of the namespace, name and metadata
// are checked before any of them is hashed, kept or logged.
func (s *Server) parse(ref *externalscaler.ScaledObjectRef) (metadata.Request, trigger.ID, error) {
	if err := checkRef(ref); err != nil {
		return metadata.Request{}, trigger.ID{}, err
	}
	return s.parseChecked(ref)
}

// checkRef refuses a missing ref, and a namespace, name or metadata past
// its bound.
func checkRef(ref *externalscaler.ScaledObjectRef) error {
	if ref == nil {
		return status.Error(codes.InvalidArgument, "scaledObjectRef is required")
	}
	if err := metadata.CheckTriggerBounds(ref.GetNamespace(), ref.GetName(), ref.GetScalerMetadata()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// parseChecked is parse of a ref that checkRef has passed.
func (s *Server) parseChecked(ref *externalscaler.ScaledObjectRef) (metadata.Request, trigger.ID, error) {
	r, id, err := s.parsed.get(ref)
	if err != nil {
		return *r, id, err
	}
	return *r, id, s.check(ref, r, id)
}

// check holds a parsed trigger to the connection it names and admits it:
// what the operator's configuration says of it, where the parse said
// what the trigger is.
func (s *Server) check(ref *externalscaler.ScaledObjectRef, r *metadata.Request, id trigger.ID) error {
	if r.ConnectionKeys {
		env := s.opts.Env
		env.Namespace = ref.GetNamespace()
		if err := metadata.CheckConnection(ref.GetScalerMetadata(), r.Target.Conn, env); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	// Admission is per call, after the cached parse: it depends on quotas
	// and expiry, which change while the parse does not. The metadata is
	// hashed once, for both, and the registry keeps the cached request
	// itself, not a copy.
	return s.admit(id, r)
}

// parseMetadata is the default ParseFunc: the trigger's metadata against
// Env, in the ScaledObject's namespace.
func (s *Server) parseMetadata(ref *externalscaler.ScaledObjectRef) (metadata.Request, error) {
	env := s.opts.Env
	env.Namespace = ref.GetNamespace()
	// ParseTrigger, not Parse: a trigger's hygiene keys never fail its
	// metric, and the keys only configuration may set are refused.
	r, err := metadata.ParseTrigger(ref.GetScalerMetadata(), env)
	if err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	return r, nil
}

// admit passes a request to the trigger policy, which may refuse it (a
// connection the namespace may not reach, a full quota) and enrolls the
// groups that requests ask to reclaim.
func (s *Server) admit(id trigger.ID, r *metadata.Request) error {
	if s.opts.Admit == nil {
		return nil
	}
	return s.opts.Admit(id, r)
}

// poll answers a poll (GetMetrics, IsActive) from a read of the target
// begun within the view's Freshness, which the view mostly has at hand,
// having read ahead of the poll; else it reads under pelwarden's own
// deadline. Every poll teaches the view the target's rhythm.
func (s *Server) poll(ctx context.Context, r metadata.Request) (*liveness.Snapshot, error) {
	snap, ok, err := s.view.Poll(r.Target)
	if err != nil {
		return nil, rpcstatus.Of(err, r.Target.GroupRef)
	}
	if ok {
		return snap, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	snap, err = s.view.PollWait(ctx, r.Target)
	if err != nil {
		return nil, rpcstatus.Of(err, r.Target.GroupRef)
	}
	return snap, nil
}

// snapshot reads the target under pelwarden's own deadline for a
// StreamIsActive evaluation. A zero since serves a snapshot from a read
// begun within the view's Freshness; otherwise the snapshot comes from a
// read that began after since.
func (s *Server) snapshot(ctx context.Context, r metadata.Request, since time.Time) (*liveness.Snapshot, error) {
	// A fresh snapshot at hand is the steady poll, and the StreamIsActive
	// target woken with others whose read has settled: answered without
	// the deadline, whose timer would be most of its cost.
	var snap *liveness.Snapshot
	var ok bool
	var err error
	if since.IsZero() {
		snap, ok, err = s.view.Cached(r.Target)
	} else {
		snap, ok, err = s.view.CachedSince(r.Target, since)
	}
	if err != nil {
		return nil, rpcstatus.Of(err, r.Target.GroupRef)
	}
	switch {
	case ok && (snap.StreamMissing || snap.GroupMissing) && since.IsZero():
		// A read that found no stream or group is not served again: one
		// created since, and the entries read from it, are seen at this
		// poll. Such a read is a few commands that fail at once, and a
		// target has one read in flight at a time, which the polls that
		// began before it share.
		since = time.Now()
	case ok:
		return snap, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	if since.IsZero() {
		snap, err = s.view.Snapshot(ctx, r.Target)
	} else {
		snap, err = s.view.RefreshSince(ctx, r.Target, since)
	}
	if err != nil {
		return nil, rpcstatus.Of(err, r.Target.GroupRef)
	}
	return snap, nil
}

func metricSpec(r metadata.Request) *externalscaler.GetMetricSpecResponse {
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{
		MetricName:      r.MetricName,
		TargetSize:      int64(max(1, r.TargetValue+0.5)),
		TargetSizeFloat: r.TargetValue,
	}}}
}
