package liveness

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHeartbeatAcceptsPlainTimesAndJSONObjects(t *testing.T) {
	t.Parallel()
	ms := time.UnixMilli(1700000000123)
	cases := map[string]struct {
		in   string
		want Beat
		// errMention is a part of the error; empty means no error.
		errMention string
	}{
		"seconds":            {in: "1700000000", want: Beat{At: time.Unix(1700000000, 0)}},
		"fractional seconds": {in: "1700000000.5", want: Beat{At: time.Unix(1700000000, 5e8)}},
		"milliseconds":       {in: "1700000000123", want: Beat{At: ms}},
		"surrounding space":  {in: " 1700000000 ", want: Beat{At: time.Unix(1700000000, 0)}},
		"JSON with a time in milliseconds": {
			in: `{"time": 1700000000123}`, want: Beat{At: ms},
		},
		"JSON as the seed's workers write it, degraded with reasons": {
			in:   `{"agentId":"review-e-codex","ts":1700000000123,"degraded":true,"degradedReasons":["codex_quota_exhausted_until_2026-05-16T12:00:00Z"]}`,
			want: Beat{At: ms, Degraded: true, Reasons: []string{"codex_quota_exhausted_until_2026-05-16T12:00:00Z"}},
		},
		"JSON with an RFC 3339 timestamp and short reasons": {
			in:   `{"timestamp":"2023-11-14T22:13:20.123Z","degraded":true,"reasons":["db down"]}`,
			want: Beat{At: ms, Degraded: true, Reasons: []string{"db down"}},
		},
		"JSON with the time as a numeric string in seconds": {
			in: `{"time":"1700000000"}`, want: Beat{At: time.Unix(1700000000, 0)},
		},
		"JSON reasons without degraded are not kept": {
			in: `{"time":1700000000123,"degraded":false,"degradedReasons":["old"]}`, want: Beat{At: ms},
		},
		"JSON reasons are bounded and made one line": {
			in:   `{"time":1700000000123,"degraded":true,"reasons":["a\nb","","x","x","x","x","x","x","x","x"]}`,
			want: Beat{At: ms, Degraded: true, Reasons: []string{"a b", "x", "x", "x", "x", "x", "x", "x"}},
		},
		"not a number":                 {in: "alive", errMention: "not a positive Unix time"},
		"negative":                     {in: "-5", errMention: "not a positive Unix time"},
		"zero":                         {in: "0", errMention: "not a positive Unix time"},
		"beyond milliseconds":          {in: "1e18", errMention: "past any Unix time"},
		"not a finite number":          {in: "NaN", errMention: "not a positive Unix time"},
		"infinite is not alive":        {in: "+Inf", errMention: "not a positive Unix time"},
		"JSON without a time":          {in: `{"degraded":true}`, errMention: `no time: put it under "time"`},
		"JSON with two times":          {in: `{"time":1700000000,"ts":1700000001}`, errMention: `both "time" and "ts"`},
		"JSON with a time that is not": {in: `{"time":"soon"}`, errMention: `field "time" must be a Unix time`},
		"JSON with a boolean time":     {in: `{"time":true}`, errMention: `field "time" must be a Unix time`},
		"JSON degraded not a boolean":  {in: `{"time":1700000000,"degraded":"yes"}`, errMention: `field "degraded" must be true or false`},
		"JSON reasons not strings":     {in: `{"time":1700000000,"degraded":true,"reasons":[1]}`, errMention: `must be a list of strings`},
		"broken JSON":                  {in: `{"time":`, errMention: "not valid JSON"},
		"a value too large to be one":  {in: "{" + strings.Repeat(" ", 70<<10) + "}", errMention: "more than the"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHeartbeat(tc.in)
			if tc.errMention != "" {
				require.ErrorContains(t, err, tc.errMention)
				return
			}
			require.NoError(t, err)
			require.True(t, tc.want.At.Equal(got.At), "want %v, got %v", tc.want.At, got.At)
			require.Equal(t, tc.want.Degraded, got.Degraded)
			require.Equal(t, tc.want.Reasons, got.Reasons)
		})
	}
}

func TestALongDegradedReasonIsCutAtACharacterBoundary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200)
	b, err := ParseHeartbeat(`{"time":1700000000,"degraded":true,"reasons":["` + long + `"]}`)
	require.NoError(t, err)
	require.Len(t, b.Reasons, 1)
	require.LessOrEqual(t, len(b.Reasons[0]), maxReasonLen)
	require.True(t, strings.HasSuffix(b.Reasons[0], "é..."), "cut after a whole character: %q", b.Reasons[0][len(b.Reasons[0])-8:])
}

// TestReadHeartbeatJudgesAgeOnRedisClock: fresh, stale, a little ahead
// (clock skew within the tolerance) and far ahead.
func TestReadHeartbeatJudgesAgeOnRedisClock(t *testing.T) {
	t.Parallel()
	spec := heartbeatSpec()
	at := func(d time.Duration) HeartbeatObs {
		return HeartbeatObs{Exists: true, Value: `{"time":"` + serverNow.Add(d).Format(time.RFC3339Nano) + `"}`}
	}
	cases := map[string]struct {
		obs   HeartbeatObs
		state HeartbeatState
	}{
		"a second old is fresh":                       {beat(time.Second), HeartbeatFresh},
		"past the max age is stale":                   {beat(6 * time.Second), HeartbeatStale},
		"a second ahead is fresh (skew tolerated)":    {beat(-time.Second), HeartbeatFresh},
		"just within the tolerance is fresh":          {at(FutureTolerance), HeartbeatFresh},
		"past the tolerance is from the future":       {at(FutureTolerance + time.Millisecond), HeartbeatFuture},
		"an hour ahead is from the future":            {beat(-time.Hour), HeartbeatFuture},
		"SET hb:x 9999999999 is not Alive forever":    {HeartbeatObs{Exists: true, Value: "9999999999"}, HeartbeatFuture},
		"a missing key is missing":                    {HeartbeatObs{}, HeartbeatMissing},
		"an unparsable value is an error":             {HeartbeatObs{Exists: true, Value: "ok"}, HeartbeatError},
		"a JSON heartbeat is judged by its own time":  {HeartbeatObs{Exists: true, Value: `{"time":` + beat(time.Second).Value + `}`}, HeartbeatFresh},
		"a stale JSON heartbeat that says degraded":   {HeartbeatObs{Exists: true, Value: `{"time":` + beat(time.Hour).Value + `,"degraded":true}`}, HeartbeatStale},
		"a fresh JSON heartbeat that says degraded":   {HeartbeatObs{Exists: true, Value: `{"time":` + beat(0).Value + `,"degraded":true}`}, HeartbeatFresh},
		"a JSON heartbeat from the future is flagged": {HeartbeatObs{Exists: true, Value: `{"time":` + beat(-time.Hour).Value + `}`}, HeartbeatFuture},
		"a week old is still a heartbeat":             {beat(PlausibleAge), HeartbeatStale},
		"older than a week is no heartbeat":           {beat(PlausibleAge + time.Millisecond), HeartbeatError},
		"a PIN read as seconds is no heartbeat":       {HeartbeatObs{Exists: true, Value: "4711"}, HeartbeatError},
		"a hash is no heartbeat":                      {HeartbeatObs{Exists: true, Err: NotAString{Type: "hash"}}, HeartbeatError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hb := readHeartbeat(spec, "hb:x", Observation{ServerTime: serverNow, Heartbeats: map[string]HeartbeatObs{"hb:x": tc.obs}})
			require.Equal(t, tc.state, hb.State, "%+v", hb)
		})
	}
}

// TestNoHeartbeatReasonShowsTheValue: whatever a heartbeat key holds, the
// reason a caller without credentials reads names its size and type, and
// an age is given only for a plausible time. The values are ones a
// heartbeat key might hold by mistake: a password, a PIN that parses as a
// time, a token in JSON, and numbers far in the past or future.
func TestNoHeartbeatReasonShowsTheValue(t *testing.T) {
	t.Parallel()
	spec := heartbeatSpec()
	cases := map[string]struct {
		value string
		// mention is a part of the reason.
		mention string
	}{
		"a password":                    {"Sup3r-S3cret-Passw0rd!", "a string of 22 bytes"},
		"a PIN read as seconds":         {"4711", "not a plausible heartbeat time"},
		"a PIN read as milliseconds":    {"1747396800123", "not a plausible heartbeat time"},
		"a number far ahead":            {"9999999999", "not a plausible heartbeat time"},
		"a number just past the window": {strconv.FormatInt(serverNow.Add(-PlausibleAge-time.Second).Unix(), 10), "not a plausible heartbeat time"},
		"JSON that is broken":           {`{"token":"Sup3r-S3cret-Passw0rd!"`, "a syntax error at byte"},
		"JSON with a secret for a time": {`{"time":"Sup3r-S3cret-Passw0rd!"}`, "a string of 24 bytes"},
		"JSON with no time":             {`{"token":"Sup3r-S3cret-Passw0rd!"}`, "no time"},
		"JSON with an old time":         {`{"time":4711,"degraded":true,"reasons":["Sup3r-S3cret-Passw0rd!"]}`, "not a plausible heartbeat time"},
		"JSON dated ahead, degraded":    {`{"time":9999999999,"degraded":true,"reasons":["Sup3r-S3cret-Passw0rd!"]}`, "not a plausible heartbeat time"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hb := readHeartbeat(spec, "hb:x", Observation{ServerTime: serverNow, Heartbeats: map[string]HeartbeatObs{"hb:x": {Exists: true, Value: tc.value}}})
			require.NotEqual(t, HeartbeatFresh, hb.State)
			require.NotEqual(t, HeartbeatStale, hb.State, "an age is given only for a plausible time")
			r := heartbeatReason(spec, hb)
			require.Contains(t, r.String(), tc.mention)
			require.Negative(t, r.Age, "no age: it would give the number away")
			for _, secret := range []string{"Sup3r", "4711", "1747396800123", "9999999999", tc.value} {
				require.NotContains(t, r.String(), secret)
			}
			j := Judge(spec, Evidence{Listed: true, Inactive: -1, Heartbeat: hb})
			require.Equal(t, Unknown, j.Verdict, "a value that is no heartbeat is no evidence: %s", ReasonsString(j.Reasons))
		})
	}
}

// FuzzHeartbeatReasonNeverQuotesTheValue: no value under a heartbeat key
// reaches its reason, whatever it holds, unless it is a plausible time
// (whose age is then the point); and no value panics the parser.
func FuzzHeartbeatReasonNeverQuotesTheValue(f *testing.F) {
	for _, seed := range []string{"Sup3r-S3cret-Passw0rd!", "4711", "1747396800123", "9999999999", `{"time":"x-secret-x"}`,
		`{"time":1,"reasons":["x-secret-x"],"degraded":true}`, `{"ts":"x-secret-x","time":1}`, `{"time":`, "{\"time\":\"2023-11-14T22:13:20Z\"}", ""} {
		f.Add(seed)
	}
	spec := heartbeatSpec()
	f.Fuzz(func(t *testing.T, v string) {
		hb := readHeartbeat(spec, "hb:x", Observation{ServerTime: serverNow, Heartbeats: map[string]HeartbeatObs{"hb:x": {Exists: true, Value: v}}})
		if hb.State == HeartbeatFresh || hb.State == HeartbeatStale {
			require.LessOrEqual(t, hb.Age, PlausibleAge)
			return
		}
		// Any run of letters may occur in a reason's own words, so the
		// check is on characters no reason uses: one from the value that
		// shows up in the reason came from the value.
		r := heartbeatReason(spec, hb).String()
		for _, c := range "~^|$&*!#@" {
			if strings.ContainsRune(v, c) {
				require.NotContains(t, r, string(c), "the reason quotes the value")
			}
		}
	})
}
