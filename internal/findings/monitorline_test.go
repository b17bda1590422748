package findings

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMonitorLineReadsDatabaseAddressAndArguments(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		line string
		want monitorLine
		ok   bool
	}{
		"a plain command": {line: `+1700000000.123456 [0 127.0.0.1:51234] "XREADGROUP" "GROUP" "workers" "w-1" "STREAMS" "jobs" ">"`,
			want: monitorLine{db: 0, addr: "127.0.0.1:51234", args: []string{"XREADGROUP", "GROUP", "workers", "w-1", "STREAMS", "jobs", ">"}}, ok: true},
		"escapes in arguments": {line: `+1.0 [3 10.0.0.1:1] "set" "a\"b" "c\\d" "\x00\xff" "x\ny\r\tz"`,
			want: monitorLine{db: 3, addr: "10.0.0.1:1", args: []string{"set", `a"b`, `c\d`, "\x00\xff", "x\ny\r\tz"}}, ok: true},
		"an IPv6 client": {line: `+1.0 [0 [::1]:6000] "ping"`,
			want: monitorLine{db: 0, addr: "[::1]:6000", args: []string{"ping"}}, ok: true},
		"a command run by a script": {line: `+1.0 [0 lua] "XCLAIM" "jobs" "workers" "solo" "0" "1-0"`,
			want: monitorLine{db: 0, addr: "lua", args: []string{"XCLAIM", "jobs", "workers", "solo", "0", "1-0"}}, ok: true},
		"a unix socket client": {line: `+1.0 [0 unix:/tmp/redis.sock] "ping"`,
			want: monitorLine{db: 0, addr: "unix:/tmp/redis.sock", args: []string{"ping"}}, ok: true},
		"the OK that starts the feed": {line: "+OK"},
		"an unterminated argument":    {line: `+1.0 [0 1.2.3.4:5] "set" "ab`},
		"a truncated hex escape":      {line: `+1.0 [0 1.2.3.4:5] "\x4"`},
		"a bad database number":       {line: `+1.0 [x 1.2.3.4:5] "ping"`},
		"no address":                  {line: `+1.0 [0] "ping"`},
		"a skipped long line":         {line: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseMonitorLine(tc.line)
			require.Equal(t, tc.ok, ok)
			if tc.ok {
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestConsumerOfNamesTheConsumerOfThisStreamAndGroupOnly(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args []string
		want string
		cmd  string
	}{
		"XREADGROUP with options":           {args: []string{"xreadgroup", "group", "workers", "w-1", "COUNT", "10", "BLOCK", "5000", "NOACK", "STREAMS", "jobs", ">"}, want: "w-1", cmd: "XREADGROUP"},
		"XREADGROUP of two streams":         {args: []string{"XREADGROUP", "GROUP", "workers", "w-1", "STREAMS", "other", "jobs", ">", ">"}, want: "w-1", cmd: "XREADGROUP"},
		"XREADGROUP of another stream":      {args: []string{"XREADGROUP", "GROUP", "workers", "w-1", "STREAMS", "other", "jobs"}},
		"XREADGROUP of another group":       {args: []string{"XREADGROUP", "GROUP", "others", "w-1", "STREAMS", "jobs", ">"}},
		"XREADGROUP with an unknown option": {args: []string{"XREADGROUP", "GROUP", "workers", "w-1", "WHAT", "STREAMS", "jobs", ">"}},
		"XCLAIM":                            {args: []string{"XCLAIM", "jobs", "workers", "w-2", "0", "1-0"}, want: "w-2", cmd: "XCLAIM"},
		"XAUTOCLAIM":                        {args: []string{"xautoclaim", "jobs", "workers", "w-3", "0", "0-0"}, want: "w-3", cmd: "XAUTOCLAIM"},
		"XCLAIM on another group":           {args: []string{"XCLAIM", "jobs", "others", "w-2", "0", "1-0"}},
		"XACK names no consumer":            {args: []string{"XACK", "jobs", "workers", "1-0"}},
		"XPENDING of a consumer":            {args: []string{"XPENDING", "jobs", "workers", "-", "+", "10", "w-1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			consumer, cmd, ok := consumerOf(tc.args, stream, group)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, consumer)
			require.Equal(t, tc.cmd, cmd)
		})
	}
}
