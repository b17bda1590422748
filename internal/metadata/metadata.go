// Package metadata parses a KEDA trigger's metadata (the keys of KEDA's
// redis-streams scaler plus pelwarden's own) into a checked Request. Hygiene
// targets in the configuration use the same keys.
package metadata

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// Defaults for metadata a trigger leaves out.
const (
	// DefaultConnection is the Redis connection a trigger without `redis`
	// reaches. The PELWARDEN_REDIS_* variables and --redis-* flags define
	// the connection of this name (internal/config), so a pelwarden started
	// with only --redis-addr serves such triggers.
	DefaultConnection = "default"
	// DefaultPendingEntriesCount matches KEDA's redis-streams scaler, so a
	// moved ScaledObject scales the same.
	DefaultPendingEntriesCount = 5
	// DefaultGhostIdleSeconds: five minutes without a read attempt. Workers
	// call XREADGROUP at least every BLOCK timeout, so only a stuck or dead
	// process stays this quiet; long jobs need heartbeats.
	DefaultGhostIdleSeconds = 300
	// DefaultHeartbeatMaxAgeSeconds: three missed beats of a 10 s heartbeat.
	DefaultHeartbeatMaxAgeSeconds = 30
	maxSeconds                    = 366 * 24 * 3600
	// MinDuration is the shortest non-zero duration a *Seconds key takes,
	// checked after conversion: Redis keeps idle times in milliseconds, so
	// anything shorter reaches XPENDING IDLE and the scripts as 0, "any
	// idle", and 1e-9 would pass a "> 0" check on the number as written.
	MinDuration = time.Millisecond
	// MinTarget is the smallest pendingEntriesCount, lagCount or
	// backlogCount: one entry per replica. KEDA's own redis-streams scaler
	// takes whole numbers; a smaller target asks for more replicas than
	// there are entries, and 1e-300 asks for maxReplicaCount at once.
	MinTarget = 1
	// MaxNameLen is the longest stream, group, consumer or key name
	// accepted, in bytes, here and in the Admin API.
	MaxNameLen = 1024
	// maxMetricName bounds a generated metric name.
	maxMetricName = 200
)

// Request is a trigger's metadata, parsed and checked.
type Request struct {
	Target liveness.Target
	Metric policy.Metric
	// TargetValue is the per-replica target of the metric.
	TargetValue float64
	// Activation is the threshold above which the target is active.
	Activation float64
	// MetricName is the name reported in GetMetricSpec and GetMetrics.
	MetricName string
	// Hygiene is what the hygiene loop does for this target; Mode off
	// leaves the group alone.
	Hygiene policy.Hygiene
	// HygieneErr, from ParseTrigger only, says why the hygiene keys of a
	// trigger that asks for reclaim were not accepted; Hygiene is then off.
	// The metric fields are valid either way.
	HygieneErr *Error
	// Profile names the liveness profile (livenessProfile) whose spec is
	// Target.Spec, thresholds lengthened; empty when the trigger gave its
	// own liveness keys.
	Profile string
	// Credentials names the credential keys of KEDA's scalers the trigger
	// carries (KEDAKeys, Credential); their values are never kept.
	Credentials []string
	// ConnectionKeys says the trigger carries connection keys of KEDA's
	// scalers: CheckConnection holds them to the connection on every call,
	// since the values KEDA resolved from the environment are not kept.
	ConnectionKeys bool
}

// Error names the metadata key that is wrong and what it accepts.
type Error struct {
	Key      string
	Accepted string
	Got      string
}

func (e *Error) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("metadata %q: %s", e.Key, e.Accepted)
	}
	return fmt.Sprintf("metadata %q: %s, got %q", e.Key, e.Accepted, clip.String(e.Got, 80))
}

// Env is what a trigger's metadata is checked against.
type Env struct {
	// Conns lists the configured Redis connection names.
	Conns []string
	// Namespace is the ScaledObject's namespace, the default podNamespace;
	// empty where there is none (targets from configuration).
	Namespace string
	// Kubernetes says pelwarden watches the Kubernetes API, which the
	// kubernetes liveness source needs.
	Kubernetes bool
	// Profiles are the liveness profiles of the configuration
	// (triggers.profiles), parsed, by name: livenessProfile names one.
	Profiles map[string]liveness.Spec
	// Connections describe the connections of Conns, for the connection
	// keys of triggers moved from KEDA's scalers (CheckConnection).
	Connections []Connection
	// Reaches, when set, says the trigger policy lets a namespace read
	// metrics from a connection: a refused connection key's fix names only
	// connections the trigger's namespace may reach.
	Reaches func(namespace, conn string) bool
}

// Parse reads the metadata of a target from pelwarden's configuration
// (hygiene.targets), where every key is allowed and any bad key is an
// error. Keys it does not know are ignored, because KEDA forwards every
// trigger key (scalerAddress among them).
func Parse(md map[string]string, env Env) (Request, error) {
	return parse(fields{md: md}, env)
}

func parse(f fields, env Env) (Request, error) {
	r, err := parseMetric(f, env)
	if err != nil {
		return r, err
	}
	r.Hygiene, err = parseHygiene(f, r.Target.Stream)
	return r, err
}

// parseMetric reads the keys that decide the metric: the connection, the
// target and its liveness settings.
func parseMetric(f fields, env Env) (Request, error) {
	var r Request
	conn := f.get(KeyRedis)
	if conn == "" {
		conn = DefaultConnection
	}
	if !slices.Contains(env.Conns, conn) {
		return r, &Error{Key: KeyRedis, Accepted: "must name a configured Redis connection (" + strings.Join(env.Conns, ", ") + ")", Got: conn}
	}
	stream, err := requiredName(f, KeyStream)
	if err != nil {
		return r, err
	}
	group, err := groupName(f)
	if err != nil {
		return r, err
	}
	if err := CheckConnection(f.md, conn, env); err != nil {
		return r, err
	}
	r.Credentials, r.ConnectionKeys = CredentialKeys(f.md), hasConnectionKeys(f.md)
	r.Metric, r.TargetValue, err = parseMetricKey(f)
	if err != nil {
		return r, err
	}
	if r.Activation, err = activation(f, r.Metric); err != nil {
		return r, err
	}
	spec, profile, err := triggerSpec(f, env)
	if err != nil {
		return r, err
	}
	r.Profile = profile
	r.Target = liveness.Target{GroupRef: liveness.GroupRef{Conn: conn, Stream: stream, Group: group}, Spec: spec}
	r.MetricName = metricName(conn, stream, group)
	return r, nil
}

func parseSpec(f fields, env Env) (liveness.Spec, error) {
	var s liveness.Spec
	sources := f.get(KeyLiveness)
	if sources == "" {
		sources = string(liveness.SourceIdle)
	}
	for _, part := range strings.Split(sources, ",") {
		switch liveness.Source(strings.TrimSpace(part)) {
		case liveness.SourceIdle:
			s.Idle = true
		case liveness.SourceHeartbeat:
			s.Heartbeat = true
		case liveness.SourceKubernetes:
			s.Kubernetes = true
		default:
			return s, &Error{Key: KeyLiveness, Accepted: "must be a comma list of idle, heartbeat, kubernetes", Got: sources}
		}
	}
	if err := parsePods(f, env, &s); err != nil {
		return s, err
	}
	var err error
	if s.GhostIdle, err = seconds(f, KeyGhostIdleSeconds, DefaultGhostIdleSeconds); err != nil {
		return s, err
	}
	if s.HeartbeatMaxAge, err = seconds(f, KeyHeartbeatMaxAgeSeconds, DefaultHeartbeatMaxAgeSeconds); err != nil {
		return s, err
	}
	owner := f.get(KeyOwnerMatch)
	if s.Owner, err = liveness.ParseOwnerMatch(owner); err != nil {
		return s, &Error{Key: KeyOwnerMatch, Accepted: "must be exact, prefix or regex:<pattern with (?P<owner>...)> (" + err.Error() + ")", Got: owner}
	}
	s.HeartbeatKey = f.get(KeyHeartbeatKey)
	// One placeholder: each one multiplies the key by the candidate's
	// length, and a key names one record.
	placeholders := strings.Count(s.HeartbeatKey, "{consumer}") + strings.Count(s.HeartbeatKey, "{owner}")
	switch {
	case s.Heartbeat && placeholders != 1:
		return s, &Error{Key: KeyHeartbeatKey, Accepted: "required with liveness heartbeat: a key pattern with exactly one placeholder, {consumer} or {owner}, once", Got: s.HeartbeatKey}
	case !s.Heartbeat && s.HeartbeatKey != "":
		return s, &Error{Key: KeyHeartbeatKey, Accepted: "is used only when liveness includes heartbeat", Got: s.HeartbeatKey}
	case len(s.HeartbeatKey) > MaxNameLen:
		return s, &Error{Key: KeyHeartbeatKey, Accepted: fmt.Sprintf("must be at most %d bytes", MaxNameLen)}
	}
	return s, parseStartGrace(f, &s)
}

// parseStartGrace reads heartbeatStartGraceSeconds. Its default is the
// heartbeat max age: a worker that beats as often as the max age demands
// has written its first heartbeat by then.
func parseStartGrace(f fields, s *liveness.Spec) error {
	raw, set := f.lookup(KeyHeartbeatStartGraceSeconds)
	switch {
	case set && !s.Heartbeat:
		return &Error{Key: KeyHeartbeatStartGraceSeconds, Accepted: "is used only when liveness includes heartbeat", Got: raw}
	case !set:
		s.StartGrace = s.HeartbeatMaxAge
		return nil
	}
	var err error
	s.StartGrace, err = graceSeconds(f, KeyHeartbeatStartGraceSeconds, 0, " (a worker must beat before its first read)")
	return err
}

// DefaultPodDeletionGraceSeconds is how long a consumer whose pod went is
// given before it is a ghost: enough for a StatefulSet to bring back a pod
// of the same name, short enough for recovery in seconds.
const DefaultPodDeletionGraceSeconds = 2

func parsePods(f fields, env Env, s *liveness.Spec) error {
	keys := []string{KeyPodSelector, KeyPodNamespace, KeyPodDeletionGraceSeconds}
	if !s.Kubernetes {
		for _, k := range keys {
			if f.has(k) {
				return &Error{Key: k, Accepted: "is used only when liveness includes kubernetes"}
			}
		}
		return nil
	}
	if !env.Kubernetes {
		return &Error{Key: KeyLiveness, Accepted: "kubernetes needs kubernetes.enabled in pelwarden's configuration", Got: f.get(KeyLiveness)}
	}
	selector := f.get(KeyPodSelector)
	s.PodSelector = strings.TrimSpace(selector)
	if _, err := labels.Parse(s.PodSelector); err != nil || s.PodSelector == "" || len(s.PodSelector) > MaxNameLen {
		return &Error{Key: KeyPodSelector, Accepted: "required with liveness kubernetes: a non-empty Kubernetes label selector such as app=worker", Got: selector}
	}
	s.PodNamespace = f.get(KeyPodNamespace)
	if s.PodNamespace == "" {
		s.PodNamespace = env.Namespace
	}
	if errs := validation.IsDNS1123Label(s.PodNamespace); len(errs) > 0 {
		return &Error{Key: KeyPodNamespace, Accepted: "must be a namespace name (lowercase letters, digits and '-'); it defaults to the ScaledObject's namespace", Got: s.PodNamespace}
	}
	var err error
	s.PodGrace, err = graceSeconds(f, KeyPodDeletionGraceSeconds, DefaultPodDeletionGraceSeconds, "")
	return err
}

func requiredName(f fields, key string) (string, error) {
	v := f.get(key)
	switch {
	case v == "":
		return "", &Error{Key: key, Accepted: "is required"}
	case strings.TrimSpace(v) != v:
		return "", &Error{Key: key, Accepted: "must not begin or end with white space (KEDA's scalers trim it, so they would read another name)", Got: v}
	case len(v) > MaxNameLen:
		return "", &Error{Key: key, Accepted: fmt.Sprintf("must be at most %d bytes", MaxNameLen)}
	}
	return v, nil
}

// number parses a non-negative (or, with positive, strictly positive)
// decimal; a missing key gives def.
func number(f fields, key string, def float64, positive bool) (float64, error) {
	raw, ok := f.lookup(key)
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	bad := err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > math.MaxInt64/2 || (positive && v == 0)
	if bad {
		accepted := "must be a number >= 0"
		if positive {
			accepted = "must be a number > 0"
		}
		return 0, &Error{Key: key, Accepted: accepted, Got: raw}
	}
	return v, nil
}

func seconds(f fields, key string, def float64) (time.Duration, error) {
	v, err := number(f, key, def, true)
	d := time.Duration(v * float64(time.Second))
	if err != nil || v > maxSeconds || d < MinDuration {
		return 0, &Error{Key: key, Accepted: fmt.Sprintf("must be a number of seconds from %g (%s) to %d", MinDuration.Seconds(), MinDuration, maxSeconds), Got: f.md[key]}
	}
	return d, nil
}

// graceSeconds reads a *Seconds key that may be 0: a non-zero value must
// still be at least MinDuration once converted.
func graceSeconds(f fields, key string, def float64, zero string) (time.Duration, error) {
	v, err := number(f, key, def, false)
	d := time.Duration(v * float64(time.Second))
	if err != nil || v > maxSeconds || (d < MinDuration && v != 0) {
		return 0, &Error{Key: key, Accepted: fmt.Sprintf("must be 0%s or a number of seconds from %g (%s) to %d", zero, MinDuration.Seconds(), MinDuration, maxSeconds), Got: f.md[key]}
	}
	return d, nil
}

// metricName is a lowercase name of letters, digits and dashes, as
// Kubernetes metric names want, cut to maxMetricName bytes. It is built
// no longer than that: every trigger's request keeps it, and a cut of a
// longer string would keep the whole.
func metricName(conn, stream, group string) string {
	b := make([]byte, 0, maxMetricName)
	b = append(b, "pelwarden"...)
	for _, part := range []string{conn, stream, group} {
		b = append(b, '-')
		for _, r := range strings.ToLower(part) {
			if len(b) >= maxMetricName {
				break
			}
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				b = append(b, byte(r))
			} else {
				b = append(b, '-')
			}
		}
	}
	return string(b[:min(len(b), maxMetricName)])
}
