package admin

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// DescribeTarget reads the group afresh and says everything pelwarden
// knows of it: each consumer's verdict and why, the values last reported to
// KEDA, the recent hygiene events and the hygiene settings.
func (s *Server) DescribeTarget(ctx context.Context, req *pelwardenv1.DescribeTargetRequest) (*pelwardenv1.DescribeTargetResponse, error) {
	g, err := checkTarget(req.GetTarget(), s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	lt, snap, err := s.fresh(ctx, g)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out := &pelwardenv1.DescribeTargetResponse{Target: s.target(liveness.Latest{Target: lt, Snapshot: snap})}
	for _, rep := range s.opts.Reports.For(g) {
		out.Metrics = append(out.Metrics, metricValue(rep, now))
	}
	for _, e := range s.opts.Events.Recent(g) {
		out.RecentEvents = append(out.RecentEvents, event(e))
	}
	if h, looked := s.settings(g); looked {
		out.Hygiene = h.Describe()
	}
	if ht, ok := s.opts.Hygiene(g.Conn, g.Stream, g.Group); ok && ht.ActFrom.After(now) {
		out.HygieneActsFromMs, out.HygieneWarmUp = ht.ActFrom.UnixMilli(), ht.Why()
	}
	s.describeProvenance(g, out)
	return out, nil
}

// WatchEvents streams hygiene events, of every group or of one, until the
// client goes. A client too slow to take them loses events rather than
// slowing the loop; pelwarden_admin_events_dropped_total counts them.
func (s *Server) WatchEvents(req *pelwardenv1.WatchEventsRequest, stream grpc.ServerStreamingServer[pelwardenv1.WatchEventsResponse]) error {
	var match func(liveness.GroupRef) bool
	if req.GetTarget() != nil {
		g, err := checkTarget(req.GetTarget(), s.opts.Conns.Names())
		if err != nil {
			return err
		}
		match = func(e liveness.GroupRef) bool { return e == g }
	}
	ch, stop, err := s.opts.Events.Subscribe(match)
	if err != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	defer stop()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-ch:
			if err := stream.Send(&pelwardenv1.WatchEventsResponse{Event: event(e)}); err != nil {
				return err
			}
		}
	}
}

func event(e events.Event) *pelwardenv1.Event {
	return &pelwardenv1.Event{
		TimeMs:   e.Time.UnixMilli(),
		Target:   &pelwardenv1.TargetRef{Redis: e.Group.Conn, Stream: e.Group.Stream, Group: e.Group.Group},
		Consumer: e.Consumer,
		Action:   string(e.Action),
		Entries:  e.Entries,
		Source:   string(e.Source),
		Detail:   e.Detail,
	}
}
