package liveness

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// FutureTolerance is how far ahead of Redis's clock a heartbeat may be
// dated and still count as written now. Hosts kept by NTP agree within
// milliseconds; a heartbeat dated further ahead comes from a broken clock
// or writer, and trusting it would keep a dead worker Alive until that
// date (SET hb:x 9999999999 would be Alive forever).
const FutureTolerance = 5 * time.Second

// PlausibleAge is how long before Redis's clock a heartbeat may be dated
// and still be read as one. A worker beats every few seconds and pelwarden
// judges it Ghost once its beat is older than the max age (seconds to
// minutes), so a value dated further back than a week is not a heartbeat
// anyone is still judged by: it is some other value under the key (a PIN,
// a counter) that happens to parse as a number, and its age would give
// that value away to whoever reads DescribeTarget. Such a value is Unknown,
// with no age.
const PlausibleAge = 7 * 24 * time.Hour

// Bounds on what one heartbeat value may make pelwarden keep: the reasons
// are shown in every snapshot, so a worker cannot inflate them.
const (
	maxBeatLen         = 64 << 10
	maxDegradedReasons = 8
	maxReasonLen       = 160
)

// Beat is one heartbeat value as its worker wrote it.
type Beat struct {
	// At is when the worker wrote it, on the worker's clock.
	At time.Time
	// Degraded says the worker is alive but cannot do the work, such as a
	// provider quota exhausted until some time.
	Degraded bool
	// Reasons are the worker's own words for being degraded; empty unless
	// Degraded.
	Reasons []string
}

// jsonBeat is the JSON form of a heartbeat. The time may be under any one
// of three common names; degradedReasons is the name the seed's workers
// use, reasons a shorter one.
type jsonBeat struct {
	Time            json.RawMessage `json:"time"`
	TS              json.RawMessage `json:"ts"`
	Timestamp       json.RawMessage `json:"timestamp"`
	Degraded        bool            `json:"degraded"`
	DegradedReasons []string        `json:"degradedReasons"`
	Reasons         []string        `json:"reasons"`
}

// ParseHeartbeat reads a heartbeat value. It is either a Unix time in
// seconds or milliseconds, integer or decimal (values below 1e11 are
// seconds: 1e11 s is the year 5138, 1e11 ms is 1973), or a JSON object:
//
//	{"time": 1747396800123, "degraded": true,
//	 "degradedReasons": ["codex_quota_exhausted_until_2026-05-16T12:00:00Z"]}
//
// with the time under exactly one of "time", "ts" or "timestamp" (a number
// as above, or a string holding such a number or an RFC 3339 time), an
// optional boolean "degraded", and optional string lists "degradedReasons"
// or "reasons". Other fields are ignored, so a heartbeat may carry more.
//
// Its errors describe the value by its size and shape, never by its
// content: the key may hold something other than a heartbeat (a password,
// a token), and the reasons they end up in are open to whoever reaches
// the gRPC port.
func ParseHeartbeat(v string) (Beat, error) {
	s := strings.TrimSpace(v)
	if len(s) > maxBeatLen {
		return Beat{}, fmt.Errorf("heartbeat value is %d bytes, more than the %d accepted", len(s), maxBeatLen)
	}
	if strings.HasPrefix(s, "{") {
		return parseJSONBeat(s)
	}
	at, err := parseUnix(s)
	if err != nil {
		return Beat{}, fmt.Errorf("heartbeat value (%s) %w; a heartbeat is a Unix time in seconds or milliseconds, or a JSON object with a time", Describe(v), err)
	}
	return Beat{At: at}, nil
}

// NotAString is the read of a heartbeat key that holds another type than
// a string (a hash, a list, ...): named by its type, never its content.
type NotAString struct {
	// Type is what Redis's TYPE answered, or empty when it could not say.
	Type string
}

func (e NotAString) Error() string {
	if e.Type == "" {
		return "the key holds a value that is not a string"
	}
	return "the key holds a value of type " + e.Type + ", not a string"
}

// Describe names a string value by its size alone, for a reason or a log
// line that must not show it.
func Describe(v string) string {
	if v == "" {
		return "an empty string"
	}
	if len(v) == 1 {
		return "a string of 1 byte"
	}
	return fmt.Sprintf("a string of %d bytes", len(v))
}

func parseJSONBeat(s string) (Beat, error) {
	var jb jsonBeat
	if err := json.Unmarshal([]byte(s), &jb); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			want := "a list of strings"
			if te.Field == "degraded" {
				want = "true or false"
			}
			return Beat{}, fmt.Errorf("heartbeat JSON field %q must be %s, got a %s", te.Field, want, te.Value)
		}
		// The decoder's own message quotes the character it stopped at;
		// the offset says where without showing it.
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Beat{}, fmt.Errorf("heartbeat value (%s) is not valid JSON: a syntax error at byte %d", Describe(s), se.Offset)
		}
		return Beat{}, fmt.Errorf("heartbeat value (%s) is not valid JSON", Describe(s))
	}
	var name string
	var raw json.RawMessage
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"time", jb.Time}, {"ts", jb.TS}, {"timestamp", jb.Timestamp}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		if raw != nil {
			return Beat{}, fmt.Errorf("heartbeat JSON has both %q and %q: give the time once", name, f.name)
		}
		name, raw = f.name, f.raw
	}
	if raw == nil {
		return Beat{}, errors.New(`heartbeat JSON has no time: put it under "time" as Unix seconds or milliseconds, or an RFC 3339 string`)
	}
	at, err := jsonTime(raw)
	if err != nil {
		return Beat{}, fmt.Errorf("heartbeat JSON field %q must be a Unix time in seconds or milliseconds, or an RFC 3339 string: its value (%s) %w", name, jsonShape(raw), err)
	}
	b := Beat{At: at, Degraded: jb.Degraded}
	if b.Degraded {
		for _, r := range append(jb.DegradedReasons, jb.Reasons...) {
			if len(b.Reasons) == maxDegradedReasons {
				break
			}
			if r = cleanReason(r); r != "" {
				b.Reasons = append(b.Reasons, r)
			}
		}
	}
	return b, nil
}

// jsonShape names a JSON value's type and size, not its content.
func jsonShape(raw json.RawMessage) string {
	kind := "a number"
	switch raw[0] {
	case '"':
		kind = "a string"
	case 't', 'f':
		kind = "a boolean"
	case '{':
		kind = "an object"
	case '[':
		kind = "a list"
	}
	return fmt.Sprintf("%s of %d bytes", kind, len(raw))
}

// jsonTime reads a JSON time: a number, or a string holding a number or an
// RFC 3339 time.
func jsonTime(raw json.RawMessage) (time.Time, error) {
	if raw[0] != '"' {
		return parseUnix(string(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, errors.New("is not a JSON string")
	}
	if at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s)); err == nil {
		return at, nil
	}
	return parseUnix(s)
}

// parseUnix reads a Unix time in seconds or milliseconds. Its errors read
// after the value they describe.
func parseUnix(v string) (time.Time, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return time.Time{}, errors.New("is not a positive Unix time in seconds or milliseconds")
	}
	if f < 1e11 {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	if f > 1e15 {
		return time.Time{}, errors.New("is past any Unix time in milliseconds")
	}
	return time.UnixMilli(int64(f)), nil
}

// cleanReason makes a worker's reason fit one line of a table: control
// characters become spaces, and a long one is cut at a character boundary.
func cleanReason(r string) string {
	return clip.String(strings.TrimSpace(strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, r)), maxReasonLen)
}

// heartbeatFor finds the heartbeat evidence and the owner of one consumer.
// With an {owner} pattern the longest owner candidate whose key exists
// decides; with prefix matching that is also how the owner is known.
func heartbeatFor(spec Spec, consumer string, obs Observation) (Heartbeat, string) {
	noInfo := func(string) bool { return false }
	owner, _ := spec.Owner.Resolve(consumer, noInfo)
	if !spec.Heartbeat {
		return Heartbeat{}, owner
	}
	keys := spec.HeartbeatKeys(consumer)
	if len(keys) == 0 {
		return Heartbeat{State: HeartbeatError, Err: "no owner matches the consumer name under ownerMatch " + spec.Owner.String()}, ""
	}
	if !spec.byOwner() {
		return readHeartbeat(spec, keys[0], obs), owner
	}
	cands := spec.Owner.Candidates(consumer)
	for i, key := range keys {
		if hb := readHeartbeat(spec, key, obs); hb.State != HeartbeatMissing {
			return hb, cands[i]
		}
	}
	return readHeartbeat(spec, keys[0], obs), owner
}

// readHeartbeat judges one key's read against Redis's clock: fresh within
// the max age, stale past it, and not trusted when dated in the future
// beyond FutureTolerance or further back than PlausibleAge. An age is kept
// only for a plausible time, so no other number under the key can be read
// back from it.
func readHeartbeat(spec Spec, key string, obs Observation) Heartbeat {
	r, ok := obs.Heartbeats[key]
	switch {
	case !ok:
		return Heartbeat{State: HeartbeatUnread, Key: key}
	case r.Err != nil:
		return Heartbeat{State: HeartbeatError, Key: key, Err: r.Err.Error()}
	case !r.Exists:
		return Heartbeat{State: HeartbeatMissing, Key: key}
	}
	b, err := ParseHeartbeat(r.Value)
	if err != nil {
		return Heartbeat{State: HeartbeatError, Key: key, Err: err.Error()}
	}
	hb := Heartbeat{Key: key, Degraded: b.Degraded, DegradedReasons: b.Reasons, claim: b.At}
	age := obs.ServerTime.Sub(b.At)
	switch {
	case age < -FutureTolerance:
		hb.State = HeartbeatFuture
	case age > PlausibleAge:
		return Heartbeat{State: HeartbeatError, Key: key, Err: fmt.Sprintf("the value (%s) is not a plausible heartbeat time: "+
			"it reads as a time more than %s before Redis's clock", Describe(r.Value), PlausibleAge)}
	case age > spec.HeartbeatMaxAge:
		hb.State, hb.Age = HeartbeatStale, age
	default:
		hb.State, hb.Age = HeartbeatFresh, max(age, 0)
	}
	return hb
}
