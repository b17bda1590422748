package app

import (
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// class is what a credential allows, or what a call needs.
type class int

const (
	// nobody: the call needs no credential (the scaler, health,
	// reflection, the read RPCs).
	nobody class = iota
	// workerClass: a worker's own Deregister.
	workerClass
	// operatorClass: everything.
	operatorClass
)

func (c class) String() string {
	switch c {
	case workerClass:
		return "worker"
	case operatorClass:
		return "operator"
	default:
		return "none"
	}
}

// requiredClass maps each guarded RPC to the credential it needs: the one
// table of who may change a group.
var requiredClass = map[string]class{
	pelwardenv1.Admin_Reclaim_FullMethodName:        operatorClass,
	pelwardenv1.Admin_DeleteConsumer_FullMethodName: operatorClass,
	pelwardenv1.Admin_Deregister_FullMethodName:     workerClass,
}

// required is the credential a call needs. A Findings call that asks for a
// MONITOR sample needs the operator's: MONITOR slows the whole Redis
// server while it runs. A dry-run Reclaim needs none: it runs the guarded
// scripts with their writes off, as Plan does, and the handler reads the
// same request's dry_run, so no call can pass here dry and act wet.
func required(method string, req any) class {
	switch r := req.(type) {
	case *pelwardenv1.FindingsRequest:
		if r.GetSampleMs() > 0 {
			return operatorClass
		}
	case *pelwardenv1.ReclaimRequest:
		if r.GetDryRun() {
			return nobody
		}
	}
	return requiredClass[method]
}

// caller is who presented a credential.
type caller struct {
	class class
	// consumer binds a worker credential to one consumer name; empty
	// allows any.
	consumer string
	// streams bind a worker credential to the streams these path.Match
	// globs match; nil allows any.
	streams []string
	who     string
}

// allows refuses a call the caller's credential does not cover: an
// operator's call by a worker, or a Deregister of another consumer than
// the one the worker's certificate names, or on a stream its token's
// globs do not match.
func (c caller) allows(need class, method string, req any) error {
	if c.class < need {
		return status.Errorf(codes.PermissionDenied, "%s needs the %s credential; %s is a %s credential, which allows only Deregister",
			method, need, c.who, c.class)
	}
	d, ok := req.(*pelwardenv1.DeregisterRequest)
	if !ok || c.class != workerClass {
		return nil
	}
	if c.consumer != "" && d.GetConsumer() != c.consumer {
		return status.Errorf(codes.PermissionDenied, "%s may deregister consumer %q only, not %q", c.who, c.consumer, clip.String(d.GetConsumer(), 80))
	}
	if stream := d.GetTarget().GetStream(); c.streams != nil && !slices.ContainsFunc(c.streams, func(g string) bool { ok, _ := path.Match(g, stream); return ok }) {
		return status.Errorf(codes.PermissionDenied, "%s may deregister consumers on streams %s only, not on %q",
			c.who, strings.Join(c.streams, ", "), clip.String(stream, 80))
	}
	return nil
}
