package trigger

import (
	"fmt"
	"path"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Refusal is why a trigger's request was not admitted, with the gRPC code
// a caller would get for it: InvalidArgument for a key a trigger may not
// set or a value below a floor, PermissionDenied for a namespace,
// connection or stream the rules do not allow (or trigger hygiene being
// off), ResourceExhausted for a quota.
type Refusal struct {
	Code codes.Code
	// Key is the metadata key refused, or "" for a quota.
	Key string
	// Rule says what is accepted and which part of the configuration
	// decides it.
	Rule string
}

func (r *Refusal) Error() string {
	if r.Key == "" {
		return r.Rule
	}
	return fmt.Sprintf("metadata %q: %s", r.Key, r.Rule)
}

// GRPCStatus makes a Refusal returned from a handler reach the caller with
// its code.
func (r *Refusal) GRPCStatus() *status.Status { return status.New(r.Code, r.Error()) }

// rules answers what triggers.rules allow.
type rules []config.TriggerRule

// reaches says some rule lets namespace ns read metrics from conn.
func (rs rules) reaches(ns, conn string) bool {
	for _, r := range rs {
		if match(r.Namespaces, ns) && match(r.Redis, conn) {
			return true
		}
	}
	return false
}

// enrolls says some rule lets namespace ns enroll stream on conn in hygiene.
func (rs rules) enrolls(ns, conn, stream string) bool {
	for _, r := range rs {
		if match(r.Namespaces, ns) && match(r.Redis, conn) && match(r.HygieneStreams, stream) {
			return true
		}
	}
	return false
}

// match says a name matches one of globs; configuration has checked that
// every glob is a valid pattern.
func match(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// CheckResult is what a trigger would get: Denied refuses every RPC of it;
// Hygiene refuses only its hygiene request, and is nil when that would be
// admitted or it asks for none.
type CheckResult struct {
	Denied, Hygiene *Refusal
}

// Check answers what Admit would for a new trigger of namespace, without
// registering it and without quotas (they depend on what else runs).
func (g *Registry) Check(namespace string, r metadata.Request) CheckResult {
	if denied := g.reach(namespace, r.Target.Conn); denied != nil {
		return CheckResult{Denied: denied}
	}
	if r.HygieneErr == nil && r.Hygiene.Mode == policy.ReclaimOff {
		return CheckResult{}
	}
	return CheckResult{Hygiene: g.check(&entry{id: ID{Namespace: namespace}, req: &r})}
}

// reach refuses a namespace that no rule lets reach conn.
func (g *Registry) reach(namespace, conn string) *Refusal {
	if g.rules.reaches(namespace, conn) {
		return nil
	}
	return &Refusal{Code: codes.PermissionDenied, Key: "redis", Rule: fmt.Sprintf("namespace %q may not reach connection %q: no triggers.rules entry names both", namespace, conn)}
}
