package admin

import (
	"context"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// CheckTriggerWith answers a CheckTrigger request with check alone, as a
// running pelwarden's CheckTrigger would: pelwarden check-trigger
// --config uses it with no pelwarden running.
func CheckTriggerWith(ctx context.Context, check CheckFunc, req *pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error) {
	s := &Server{opts: Options{CheckTrigger: check}}
	return s.CheckTrigger(ctx, req)
}
