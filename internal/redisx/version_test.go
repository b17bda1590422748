package redisx

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInfoServerGivesTheServerAndWhetherIdleCountsDeliveriesOnly(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		info    string
		want    ServerVersion
		fromDel bool
		err     string
	}{
		"Redis 7.0": {
			info: "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:ab\r\n",
			want: ServerVersion{Server: "redis", Version: "7.0.15", Major: 7, Minor: 0}, fromDel: true,
		},
		"Redis 6.2": {
			info: "redis_version:6.2.14\r\n",
			want: ServerVersion{Server: "redis", Version: "6.2.14", Major: 6, Minor: 2}, fromDel: true,
		},
		"Redis 7.2": {
			info: "redis_version:7.2.6\r\n",
			want: ServerVersion{Server: "redis", Version: "7.2.6", Major: 7, Minor: 2},
		},
		"Redis 8.0": {
			info: "redis_version:8.0.0\r\n",
			want: ServerVersion{Server: "redis", Version: "8.0.0", Major: 8, Minor: 0},
		},
		"Valkey 8.0, whose redis_version is the 7.2.4 it forked from": {
			info: "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n",
			want: ServerVersion{Server: "valkey", Version: "8.0.1", Major: 8, Minor: 0},
		},
		"no version":       {info: "# Server\r\nrun_id:ab\r\n", err: "no redis_version"},
		"a version of one": {info: "redis_version:7\r\n", err: "no redis_version"},
		"valkey without its own version": {
			info: "redis_version:7.2.4\r\nserver_name:valkey\r\n", err: "no valkey_version",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := parseInfoServer(c.info)
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

func FuzzParseInfoServerNeverPanicsAndKeepsTheVersion(f *testing.F) {
	for _, s := range [][2]string{{"", "7.0.15"}, {"valkey", "8.0.1"}, {"", "7"}, {"redis", "7.2.0"}, {"", "x.y"}, {"", "-1.-2"}, {"a\r\nb", "1.2"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, server, version string) {
		if !oneInfoValue(server) || !oneInfoValue(version) {
			return // not a value INFO could give: fields are lines, trimmed
		}
		info := "redis_version:" + version + "\r\n"
		if server != "" {
			info = "server_name:" + server + "\r\n" + server + "_version:" + version + "\r\n"
		}
		v, err := parseInfoServer(info)
		if err != nil {
			return
		}
		if server == "" {
			server = "redis"
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

func oneInfoValue(s string) bool {
	return !strings.ContainsAny(s, "\r\n") && strings.TrimSpace(s) == s
}
