package tlstest

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Usual key names of a kubernetes.io/tls Secret as cert-manager writes it.
const (
	CertKey = "tls.crt"
	KeyKey  = "tls.key"
	CAKey   = "ca.crt"
)

// dataLink is the symlink the kubelet swaps on every Secret update.
const dataLink = "..data"

// SecretDir is a directory laid out the way the kubelet mounts a Secret:
// each file is a symlink through ..data into a hidden, timestamped
// directory, and an update writes a new hidden directory and swaps ..data
// with one rename. A file's path never changes and its inode does, which is
// what a reloader must cope with.
type SecretDir struct {
	// Dir is the mount point.
	Dir string
}

// NewSecretDir makes a mount in a fresh temporary directory holding files
// (name to content).
func NewSecretDir(tb testing.TB, files map[string][]byte) *SecretDir {
	tb.Helper()
	d := &SecretDir{Dir: tb.TempDir()}
	d.Update(tb, files)
	return d
}

// Path returns the path of a file in the mount, as a pod sees it.
func (d *SecretDir) Path(name string) string {
	return filepath.Join(d.Dir, name)
}

// Update replaces the whole content of the mount at once, as a Secret
// update does: names missing from files no longer resolve afterwards.
func (d *SecretDir) Update(tb testing.TB, files map[string][]byte) {
	tb.Helper()
	fail := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("tlstest: secret dir %s: %v", what, err)
		}
	}
	// The new version must live inside the mount, beside ..data.
	version, err := os.MkdirTemp(d.Dir, "..version-") //nolint:usetesting // inside the mount, not a fresh temp dir
	fail("new version", err)
	names := make([]string, 0, len(files))
	for name, content := range files {
		fail("write "+name, os.WriteFile(filepath.Join(version, name), content, 0o600))
		names = append(names, name)
	}
	old, _ := os.Readlink(filepath.Join(d.Dir, dataLink))

	tmp := filepath.Join(d.Dir, dataLink+"_tmp")
	_ = os.Remove(tmp)
	fail("link", os.Symlink(filepath.Base(version), tmp))
	fail("swap", os.Rename(tmp, filepath.Join(d.Dir, dataLink)))

	sort.Strings(names)
	for _, name := range names {
		link := filepath.Join(d.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		fail("link "+name, os.Symlink(filepath.Join(dataLink, name), link))
	}
	if old != "" {
		fail("remove old version", os.RemoveAll(filepath.Join(d.Dir, old)))
	}
}

// ServerFiles returns the content of a TLS Secret for pair, with ca.crt
// when ca is not nil.
func ServerFiles(pair Pair, ca *CA) map[string][]byte {
	files := map[string][]byte{CertKey: pair.CertPEM, KeyKey: pair.KeyPEM}
	if ca != nil {
		files[CAKey] = ca.CertPEM
	}
	return files
}
