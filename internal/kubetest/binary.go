package kubetest

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FindBinary returns the path of the program name in dir: name itself if
// it is an executable file, otherwise name.gz, the gzipped form the
// largest binaries are kept in. Unpack writes the latter out.
func FindBinary(dir, name string) (string, error) {
	plain := filepath.Join(dir, name)
	fi, err := os.Stat(plain)
	switch {
	case err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0:
		return plain, nil
	case err == nil:
		return "", fmt.Errorf("kubetest: %s is not an executable file", plain)
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("kubetest: %w", err)
	}
	gz := plain + ".gz"
	if fi, err := os.Stat(gz); err != nil || fi.IsDir() {
		return "", fmt.Errorf("kubetest: %s has neither %s nor %s.gz", dir, name, name)
	}
	return gz, nil
}

// Unpack returns a binary FindBinary found: as it is, or gunzipped into a
// temporary directory, executable, when it is a .gz.
func Unpack(tb testing.TB, path string) string {
	tb.Helper()
	if !strings.HasSuffix(path, ".gz") {
		return path
	}
	out := filepath.Join(tb.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gz"))
	if err := gunzip(path, out); err != nil {
		tb.Fatalf("kubetest: unpack %s: %v", path, err)
	}
	return out
}

func gunzip(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, zr); err != nil {
		_ = out.Close()
		return err
	}
	return errors.Join(zr.Close(), out.Close())
}
