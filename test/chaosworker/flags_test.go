package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFlagsNameTheConnectionModeAndWhatItNeeds(t *testing.T) {
	t.Parallel()
	base := []string{"--stream", "{jobs}", "--group", "workers", "--consumer", "w-1"}
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"standalone needs --redis":       {args: nil, wantErr: "--redis is required"},
		"cluster needs seeds":            {args: []string{"--redis-mode", "cluster"}, wantErr: "--redis-addrs is required in mode cluster"},
		"sentinel needs the master name": {args: []string{"--redis-mode", "sentinel", "--redis-addrs", "a:1"}, wantErr: "--sentinel-master is required"},
		"an unknown mode is refused":     {args: []string{"--redis-mode", "ring"}, wantErr: `--redis-mode "ring": want standalone, sentinel or cluster`},
		"cluster with seeds":             {args: []string{"--redis-mode", "cluster", "--redis-addrs", "a:1,b:2"}},
		"sentinel with all it needs":     {args: []string{"--redis-mode", "sentinel", "--redis-addrs", "a:1", "--sentinel-master", "pw"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseFlags(append(append([]string(nil), base...), tc.args...), io.Discard)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.NotEmpty(t, cfg.Addrs)
		})
	}
}
