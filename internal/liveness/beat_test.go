package liveness

import (
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
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hb := readHeartbeat(spec, "hb:x", Observation{ServerTime: serverNow, Heartbeats: map[string]HeartbeatObs{"hb:x": tc.obs}})
			require.Equal(t, tc.state, hb.State, "%+v", hb)
			if tc.state == HeartbeatFuture {
				require.Greater(t, hb.Ahead, FutureTolerance)
			}
		})
	}
}
