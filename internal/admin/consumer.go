package admin

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Delete-consumer script outcomes.
const (
	consumerDeleted    = "deleted"
	consumerHasPending = "has-pending"
)

// deregisterRounds bounds how often Deregister drains the PEL again when
// the worker read more entries while it was being drained.
const deregisterRounds = 3

// DeleteConsumer deletes a consumer whose PEL is empty. The emptiness is
// checked in the same script as XGROUP DELCONSUMER, which would otherwise
// drop the consumer's pending entries for good.
func (s *Server) DeleteConsumer(ctx context.Context, req *pelwardenv1.DeleteConsumerRequest) (*pelwardenv1.DeleteConsumerResponse, error) {
	g, err := checkConsumerRequest(req.GetTarget(), req.GetConsumer(), s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.client(g)
	if err != nil {
		return nil, err
	}
	// An operator's delete need not wait for the name to go quiet: min idle 0.
	out, err := redisx.DeleteConsumer(ctx, c, g.Stream, g.Group, req.GetConsumer(), 0)
	if err != nil {
		return nil, redisStatus(err, g)
	}
	switch out {
	case consumerDeleted:
		s.publish(g, req.GetConsumer(), events.ConsumerDeleted, 1, "DeleteConsumer")
		return &pelwardenv1.DeleteConsumerResponse{Deleted: true}, nil
	case consumerHasPending:
		return nil, status.Errorf(codes.FailedPrecondition, "consumer %q holds pending entries, and deleting it would drop them for good: "+
			"give them back first with Reclaim {\"consumer\": %q}, or have the worker call Deregister", req.GetConsumer(), req.GetConsumer())
	default: // gone
		return &pelwardenv1.DeleteConsumerResponse{}, nil
	}
}

// Deregister is a worker's last call: every entry of its PEL is requeued
// (or dead-lettered at maxDeliveries), each guarded in the script to be
// pending and owned by the worker, then the consumer is deleted, guarded
// to have an empty PEL. A second call finds nothing and deletes nothing.
func (s *Server) Deregister(ctx context.Context, req *pelwardenv1.DeregisterRequest) (*pelwardenv1.DeregisterResponse, error) {
	g, err := checkConsumerRequest(req.GetTarget(), req.GetConsumer(), s.opts.Conns.Names())
	if err != nil {
		return nil, err
	}
	c, err := s.client(g)
	if err != nil {
		return nil, err
	}
	h, _ := s.settings(g)
	name := req.GetConsumer()
	out := &pelwardenv1.DeregisterResponse{}
	var failures []string
	for range deregisterRounds {
		counts, failed, err := s.drain(ctx, c, g, name, h)
		if err != nil {
			return nil, redisStatus(err, g)
		}
		out.Requeued += counts[redisx.Requeued]
		out.DeadLettered += counts[redisx.DeadLettered]
		failures = append(failures, failed...)
		result, err := redisx.DeleteConsumer(ctx, c, g.Stream, g.Group, name, 0)
		if err != nil {
			return nil, redisStatus(err, g)
		}
		switch {
		case result == consumerDeleted:
			out.ConsumerDeleted = true
			s.publish(g, name, events.Deregistered, out.Requeued+out.DeadLettered, "consumer deleted")
			return out, nil
		case result != consumerHasPending: // gone: a repeated call
			return out, nil
		case len(failed) > 0:
			return nil, status.Errorf(codes.Unavailable, "%d entries of %q could not be requeued and stay pending (%s); the consumer was kept: retry Deregister",
				len(failures), name, strings.Join(failures[:min(3, len(failures))], "; "))
		}
		// The worker read more entries while it was drained: drain again.
	}
	return nil, status.Errorf(codes.FailedPrecondition, "consumer %q kept reading entries while it deregistered; "+
		"stop reading (XREADGROUP) before calling Deregister. %d entries were requeued and %d dead-lettered so far", name, out.Requeued, out.DeadLettered)
}

// drain requeues every entry of a consumer's PEL, whatever its idle time,
// in guarded batches, and returns the counts and the failed writes.
func (s *Server) drain(ctx context.Context, c *redis.Client, g events.Group, consumer string, h policy.Hygiene) (map[string]int64, []string, error) {
	counts := map[string]int64{}
	var failed []string
	after := ""
	for {
		res, err := redisx.RunReclaim(ctx, c, redisx.Reclaim{
			Stream: g.Stream, Group: g.Group, Consumer: consumer, Mode: redisx.ModeRequeue,
			CarryField: h.DeliveryCountField, MaxDeliveries: h.MaxDeliveries, DeadLetterStream: h.DeadLetterStream,
			DeleteOriginal: h.DeleteOriginal, After: after, Count: s.opts.BatchSize,
		})
		if err != nil {
			return counts, failed, err
		}
		s.tally(g, consumer, res.Counts, counts, "Deregister")
		for _, o := range res.Outcomes {
			if o.Result == redisx.Failed {
				failed = append(failed, fmt.Sprintf("%s: %s", o.ID, o.Detail))
			}
		}
		if res.Total() < s.opts.BatchSize {
			return counts, failed, nil
		}
		after = res.Last
	}
}
