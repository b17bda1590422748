// Package rpcstatus maps pelwarden's errors to the gRPC status a client
// can act on, once, for the scaler and the Admin API alike.
package rpcstatus

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Of is the status of an error met while serving a request about g:
//   - a missing group or stream is NotFound;
//   - too many targets is ResourceExhausted;
//   - a refused action is FailedPrecondition, an incomplete one Unavailable
//     (retrying is safe);
//   - a canceled request is Canceled;
//   - anything else failed to reach Redis and is Unavailable, never a
//     zero that would scale workers away.
//
// An error that already is a status passes through.
func Of(err error, g liveness.GroupRef) error {
	var refused *reclaim.Refused
	var incomplete *reclaim.Incomplete
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case redisx.IsGroupMissing(err):
		return GroupMissing(g)
	case errors.Is(err, liveness.ErrTooManyTargets), errors.Is(err, hygiene.ErrFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.As(err, &refused):
		return status.Error(codes.FailedPrecondition, refused.Reason)
	case errors.As(err, &incomplete):
		return status.Error(codes.Unavailable, incomplete.Reason)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.Unavailable, "redis did not answer within the request timeout")
	default:
		return status.Error(codes.Unavailable, fmt.Sprintf("redis: %v", err))
	}
}

// GroupMissing is the NotFound status of a group Redis does not have.
func GroupMissing(g liveness.GroupRef) error {
	return status.Errorf(codes.NotFound, "stream %q has no consumer group %q on redis %q (or the stream does not exist)", g.Stream, g.Group, g.Conn)
}
