package redisx

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHelloRepliesGiveTheServerAndWhetherIdleCountsDeliveriesOnly(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reply   any
		want    ServerVersion
		fromDel bool
		err     string
	}{
		"Redis 7.0 over RESP3": {
			reply: map[any]any{"server": "redis", "version": "7.0.15", "proto": int64(3)},
			want:  ServerVersion{Server: "redis", Version: "7.0.15", Major: 7, Minor: 0}, fromDel: true,
		},
		"Redis 6.2 over RESP2": {
			reply: []any{"server", "redis", "version", "6.2.14", "proto", int64(2)},
			want:  ServerVersion{Server: "redis", Version: "6.2.14", Major: 6, Minor: 2}, fromDel: true,
		},
		"Redis 7.2": {
			reply: map[any]any{"server": "redis", "version": "7.2.6"},
			want:  ServerVersion{Server: "redis", Version: "7.2.6", Major: 7, Minor: 2},
		},
		"Redis 8.0": {
			reply: map[any]any{"server": "redis", "version": "8.0.0"},
			want:  ServerVersion{Server: "redis", Version: "8.0.0", Major: 8, Minor: 0},
		},
		"Valkey 8.0, which counts idle as Redis 7.2 does": {
			reply: map[any]any{"server": "valkey", "version": "8.0.1"},
			want:  ServerVersion{Server: "valkey", Version: "8.0.1", Major: 8, Minor: 0},
		},
		"no version":       {reply: map[any]any{"server": "redis"}, err: "no server and version"},
		"not a reply":      {reply: "OK", err: "unexpected reply"},
		"a version of one": {reply: []any{"server", "redis", "version", "7"}, err: "no server and version"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := parseHello(c.reply)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, v)
			require.Equal(t, c.fromDel, v.IdleFromDeliveries())
		})
	}
}

func FuzzParseHelloNeverPanicsAndKeepsTheVersion(f *testing.F) {
	for _, s := range [][2]string{{"redis", "7.0.15"}, {"valkey", "8.0.1"}, {"redis", "7"}, {"", "7.2.0"}, {"redis", "x.y"}, {"redis", "-1.-2"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, server, version string) {
		v, err := parseHello([]any{"server", server, "version", version})
		if err != nil {
			return
		}
		require.Equal(t, server, v.Server)
		require.Equal(t, version, v.Version)
		major, rest, _ := strings.Cut(version, ".")
		minor, _, _ := strings.Cut(rest, ".")
		wantMajor, err := strconv.Atoi(major)
		require.NoError(t, err, "the major part is a number")
		wantMinor, err := strconv.Atoi(minor)
		require.NoError(t, err, "the minor part is a number")
		require.Equal(t, wantMajor, v.Major)
		require.Equal(t, wantMinor, v.Minor)
	})
}
