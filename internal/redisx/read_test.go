package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestFetchWithRejectedCredentialsIsAnErrorNotAMissingGroup: when Redis
// refuses the connection's setup, go-redis runs none of the pipelined
// commands and leaves each without an error; the read must fail rather than
// find no group and report 0.
func TestFetchWithRejectedCredentialsIsAnErrorNotAMissingGroup(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Users: []string{
		"pelwarden on >right ~* resetchannels " + ACLCommands,
		"nameless on >right ~* resetchannels " + ACLCommands + " -client|setname",
	}})
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	target := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}

	tests := map[string]struct {
		user, password string
		want           string // "" for success
	}{
		"right password":                       {"pelwarden", "right", ""},
		"wrong password":                       {"pelwarden", "wrong", "WRONGPASS"},
		"user who may not name its connection": {"nameless", "right", "NOPERM"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := config.DefaultRedis("default", srv.Addr())
			c.Username, c.Password = tt.user, tt.password
			conns, err := Open([]config.Redis{c})
			require.NoError(t, err)
			t.Cleanup(func() { _ = conns.Close() })

			before := time.Now()
			obs, err := (&Reader{Conns: conns, LagEstimateCap: 10}).Fetch(ctx, target, nil)
			if tt.want == "" {
				require.NoError(t, err)
				require.False(t, obs.GroupMissing)
				require.WithinRange(t, obs.ReadAt, before, time.Now(), "the read says when Redis answered")
				return
			}
			require.ErrorContains(t, err, tt.want)
			require.False(t, obs.GroupMissing, "a refused login is not a missing group")
		})
	}
}
