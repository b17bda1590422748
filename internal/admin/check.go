package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// CheckFunc parses a trigger's metadata as the scaler does and applies the
// trigger policy to it, registering nothing. A metadata error comes back
// as Denied with code InvalidArgument.
type CheckFunc func(ctx context.Context, namespace string, md map[string]string) CheckAnswer

// CheckAnswer is what a trigger would get, and the advice that refuses
// nothing: the credential keys to remove, what its liveness cannot judge
// on its connection's Redis.
type CheckAnswer struct {
	trigger.CheckResult
	Notes []string
}

// CheckTrigger says what a trigger would get, for linting ScaledObjects.
// A namespace or metadata past its bound is the request's own error,
// before anything parses or compiles it.
func (s *Server) CheckTrigger(ctx context.Context, req *pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error) {
	if err := metadata.CheckTriggerBounds(req.GetNamespace(), "", req.GetMetadata()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res := s.opts.CheckTrigger(ctx, req.GetNamespace(), req.GetMetadata())
	out := &pelwardenv1.CheckTriggerResponse{Code: "OK", Notes: res.Notes}
	if d := res.Denied; d != nil {
		out.Code, out.Message = d.Code.String(), d.Error()
		return out, nil
	}
	if v := req.GetMetadata()["reclaim"]; v != "" && v != "off" {
		out.AsksHygiene = true
	}
	if h := res.Hygiene; h != nil {
		out.HygieneRefusal = &pelwardenv1.TriggerRefusal{Code: h.Code.String(), Key: h.Key, Message: h.Rule}
	}
	return out, nil
}
