package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// DeleteConsumer deletes a consumer whose PEL is empty. The emptiness is
// checked in the same script as XGROUP DELCONSUMER, which would otherwise
// drop the consumer's pending entries for good.
func (s *Server) DeleteConsumer(ctx context.Context, req *pelwardenv1.DeleteConsumerRequest) (*pelwardenv1.DeleteConsumerResponse, error) {
	job, _, err := s.consumerJob(req.GetTarget(), req.GetConsumer(), "DeleteConsumer")
	if err != nil {
		return nil, err
	}
	// An operator's delete need not wait for the name to go quiet: min idle 0.
	res, err := s.opts.Engine.Run(ctx, job, reclaim.Delete(req.GetConsumer(), 0))
	if err != nil {
		return nil, rpcstatus.Of(err, job.Target.GroupRef)
	}
	switch {
	case res.Counts[redisx.ConsumerDeleted] > 0:
		return &pelwardenv1.DeleteConsumerResponse{Deleted: true}, nil
	case res.Counts[redisx.DeleteHasPending] > 0:
		return nil, status.Errorf(codes.FailedPrecondition, "consumer %q holds pending entries, and deleting it would drop them for good: "+
			"give them back first with Reclaim {\"consumer\": %q}, or have the worker call Deregister", req.GetConsumer(), req.GetConsumer())
	default: // gone
		return &pelwardenv1.DeleteConsumerResponse{}, nil
	}
}

// Deregister is a worker's last call: the engine gives back its whole PEL
// and then deletes the consumer. A second call finds nothing and deletes
// nothing. It acts only on a group pelwarden looks after (hygiene.targets,
// or enrolled by a trigger): a worker credential is for leaving the work
// pelwarden already gives back, not for moving entries of a group no
// operator put in its care; and never on pelwarden's own dead-letter
// holder, whose entries are on their way out. Both are refused before
// anything reaches Redis, so a refused call leaves no trace: no entry
// moved, no event, no metric series of a group nobody looks after.
func (s *Server) Deregister(ctx context.Context, req *pelwardenv1.DeregisterRequest) (*pelwardenv1.DeregisterResponse, error) {
	job, looked, err := s.consumerJob(req.GetTarget(), req.GetConsumer(), "Deregister")
	if err != nil {
		return nil, err
	}
	g := job.Target.GroupRef
	switch {
	case liveness.IsHolder(req.GetConsumer()):
		return nil, invalid("consumer", "%q is pelwarden's reserved holder of entries on their way to the dead-letter stream, never a worker: "+
			"it cannot be deregistered", liveness.DeadLetterHolder)
	case !looked:
		return nil, status.Errorf(codes.NotFound, "pelwarden does not look after redis %q, stream %q, group %q: Deregister acts only on "+
			"groups listed under hygiene.targets or enrolled by a trigger with reclaim: requeue", g.Conn, clip.String(g.Stream, maxEcho), clip.String(g.Group, maxEcho))
	}
	d, err := s.opts.Engine.Deregister(ctx, job, req.GetConsumer())
	if err != nil {
		return nil, rpcstatus.Of(err, job.Target.GroupRef)
	}
	return &pelwardenv1.DeregisterResponse{Requeued: d.Requeued, DeadLettered: d.DeadLettered, ConsumerDeleted: d.Deleted}, nil
}

// consumerJob checks a request naming one consumer and returns the engine
// job it acts by, with the settings the group is looked after with, and
// whether the hygiene loop looks after it.
func (s *Server) consumerJob(ref *pelwardenv1.TargetRef, consumer, call string) (reclaim.Job, bool, error) {
	g, err := checkConsumerRequest(ref, consumer, s.opts.Conns.Names())
	if err != nil {
		return reclaim.Job{}, false, err
	}
	c, err := s.client(g)
	if err != nil {
		return reclaim.Job{}, false, err
	}
	h, looked := s.settings(g)
	return reclaim.Job{Client: c, Target: liveness.Target{GroupRef: g}, Hygiene: h, Source: events.SourceAdmin, Call: call}, looked, nil
}
