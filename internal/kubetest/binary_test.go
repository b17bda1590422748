package kubetest

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFindBinaryTakesThePlainProgramOrItsGzippedForm: the HPA suite fails,
// never skips, when a binary is in neither form, and runs a gzipped one
// once Unpack has written it out.
func TestFindBinaryTakesThePlainProgramOrItsGzippedForm(t *testing.T) {
	program := []byte("#!/bin/sh\necho unpacked\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write(program)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	cases := map[string]struct {
		files    map[string][]byte
		modes    map[string]os.FileMode
		want     string
		wantErr  string
		unpacked bool
	}{
		"the plain program":              {files: map[string][]byte{"kcm": program, "kcm.gz": gz.Bytes()}, want: "kcm"},
		"only the gzipped form":          {files: map[string][]byte{"kcm.gz": gz.Bytes()}, want: "kcm.gz", unpacked: true},
		"neither":                        {files: map[string][]byte{"other": program}, wantErr: "has neither kcm nor kcm.gz"},
		"a plain file not executable":    {files: map[string][]byte{"kcm": program}, modes: map[string]os.FileMode{"kcm": 0o644}, wantErr: "not an executable file"},
		"an empty directory is an error": {wantErr: "has neither kcm nor kcm.gz"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, data := range tc.files {
				mode, ok := tc.modes[f]
				if !ok {
					mode = 0o755
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, mode))
			}
			got, err := FindBinary(dir, "kcm")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, filepath.Join(dir, tc.want), got)
			bin := Unpack(t, got)
			if !tc.unpacked {
				require.Equal(t, got, bin, "a plain program is run where it is")
				return
			}
			data, err := os.ReadFile(bin)
			require.NoError(t, err)
			require.Equal(t, program, data, "the gzipped program, written out")
			fi, err := os.Stat(bin)
			require.NoError(t, err)
			require.NotZero(t, fi.Mode()&0o100, "executable")
		})
	}
}
