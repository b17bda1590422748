package kubetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinDirFailsWithoutBothBinaries: the real-API suite fails, never
// skips, when its binaries are not where EnvBin says.
func TestBinDirFailsWithoutBothBinaries(t *testing.T) {
	dir := func(files map[string]os.FileMode) string {
		d := t.TempDir()
		for name, mode := range files {
			require.NoError(t, os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"), mode))
		}
		return d
	}
	both := map[string]os.FileMode{"etcd": 0o755, "kube-apiserver": 0o755}
	cases := map[string]struct {
		env  string
		want string
	}{
		"unset":                         {env: "", want: "make test-kube KUBE_BIN="},
		"a directory that is not there": {env: filepath.Join(t.TempDir(), "missing"), want: "has no etcd"},
		"no kube-apiserver":             {env: dir(map[string]os.FileMode{"etcd": 0o755}), want: "has no kube-apiserver"},
		"kube-apiserver not executable": {env: dir(map[string]os.FileMode{"etcd": 0o755, "kube-apiserver": 0o644}), want: "not an executable"},
		"both binaries":                 {env: dir(both)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(EnvBin, tc.env)
			got, err := BinDir()
			if tc.want != "" {
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.env, got)
		})
	}
}
