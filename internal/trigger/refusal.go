package trigger

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Refusal is why a trigger's request was not admitted, with the gRPC code
// a caller would get for it: InvalidArgument for a key a trigger may not
// set or a value below a floor, PermissionDenied for a connection,
// profile, heartbeat key or stream the rules do not allow the namespace
// (or trigger hygiene being off, or asked for without a liveness
// profile), ResourceExhausted for a quota or a full share of a cap.
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
	return config.Triggers{Rules: rs}.Reaches(ns, conn)
}

// profiles says some rule lets namespace ns name liveness profile name on
// conn.
func (rs rules) profiles(ns, conn, name string) bool {
	for _, r := range rs {
		if config.MatchAny(r.Namespaces, ns) && config.MatchAny(r.Redis, conn) && config.MatchAny(r.Profiles, name) {
			return true
		}
	}
	return false
}

// heartbeatKeys says some rule lets namespace ns read heartbeat keys of
// pattern on conn, the pattern matched as written, placeholder included.
func (rs rules) heartbeatKeys(ns, conn, pattern string) bool {
	for _, r := range rs {
		if config.MatchAny(r.Namespaces, ns) && config.MatchAny(r.Redis, conn) && config.MatchAny(r.HeartbeatKeys, pattern) {
			return true
		}
	}
	return false
}

// enrolls says some rule lets namespace ns enroll stream on conn in hygiene.
func (rs rules) enrolls(ns, conn, stream string) bool {
	for _, r := range rs {
		if config.MatchAny(r.Namespaces, ns) && config.MatchAny(r.Redis, conn) && config.MatchAny(r.HygieneStreams, stream) {
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
	if denied := g.reach(namespace, &r); denied != nil {
		return CheckResult{Denied: denied}
	}
	if r.HygieneErr == nil && r.Hygiene.Mode == policy.ReclaimOff {
		return CheckResult{}
	}
	return CheckResult{Hygiene: g.check(&entry{id: ID{Namespace: namespace}, req: &r})}
}

// reach refuses what no rule lets the namespace do with a trigger's
// metric: reach its connection, name its liveness profile, or read the
// heartbeat keys it names itself. Each is the refusal of every RPC.
func (g *Registry) reach(namespace string, r *metadata.Request) *Refusal {
	conn, spec := r.Target.Conn, r.Target.Spec
	switch {
	case !g.rules.reaches(namespace, conn):
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.KeyRedis, Rule: fmt.Sprintf("namespace %q may not reach connection %q: no triggers.rules entry names both", namespace, conn)}
	case r.Profile != "" && !g.rules.profiles(namespace, conn, r.Profile):
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.ProfileKey, Rule: fmt.Sprintf("namespace %q may not name profile %q on connection %q: no triggers.rules[].profiles glob of a rule naming both matches it", namespace, r.Profile, conn)}
	case r.Profile == "" && spec.Heartbeat && !g.rules.heartbeatKeys(namespace, conn, spec.HeartbeatKey):
		return &Refusal{Code: codes.PermissionDenied, Key: metadata.KeyHeartbeatKey, Rule: fmt.Sprintf("namespace %q may not have pelwarden read keys of pattern %q on connection %q: no triggers.rules[].heartbeatKeys glob of a rule naming both matches it; name a livenessProfile instead, or ask the operator to allow the pattern", namespace, clip.String(spec.HeartbeatKey, 80), conn)}
	}
	return nil
}
