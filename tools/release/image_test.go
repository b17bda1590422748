package main

import (
	"archive/tar"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, two directories up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// makeImage runs make image into dir and returns the tarball's path.
func makeImage(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "image.tar")
	cmd := exec.Command("make", "-C", repoRoot(t), "--no-print-directory", "image", "IMAGE_OUT="+out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "make image:\n%s", b)
	return out
}

// theImage is the tarball PELWARDEN_IMAGE names (make check-image sets it
// to what make image wrote), or one make image writes now.
func theImage(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("PELWARDEN_IMAGE"); path != "" {
		return path
	}
	return makeImage(t, t.TempDir())
}

func headRevision(t *testing.T) string {
	t.Helper()
	if rev := os.Getenv("PELWARDEN_IMAGE_REVISION"); rev != "" {
		return rev
	}
	rev, err := gitIn(repoRoot(t))("rev-parse", "HEAD")
	require.NoError(t, err)
	return rev
}

// files reads the image's filesystem, as a runtime would lay it out.
func files(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[h.Name] = body
	}
}

func TestTheImageRunsTheBinaryAsNonrootWithItsLabels(t *testing.T) {
	img, err := tarball.ImageFromPath(theImage(t), nil)
	require.NoError(t, err, "the library reads the tarball")
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "linux", cf.OS)
	require.Equal(t, "65532:65532", cf.Config.User, "the chart's securityContext runs as 65532")
	require.Equal(t, []string{"/pelwarden"}, cf.Config.Entrypoint)
	require.Equal(t, []string{"serve"}, cf.Config.Cmd)
	labels := cf.Config.Labels
	require.Equal(t, "Apache-2.0", labels["org.opencontainers.image.licenses"])
	require.Equal(t, "https://github.com/pelwarden/pelwarden", labels["org.opencontainers.image.source"])
	require.Equal(t, headRevision(t), labels["org.opencontainers.image.revision"])
	require.NotEmpty(t, labels["org.opencontainers.image.version"])

	fs := files(t, img)
	require.Contains(t, string(fs["etc/passwd"]), "nonroot:x:65532:65532:")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(fs[caPath]), "the CA bundle is PEM")
	require.Greater(t, len(roots.Subjects()), 100, "the CA bundle holds the NSS roots") //nolint:staticcheck // Subjects counts the pool

	bin := filepath.Join(t.TempDir(), "pelwarden")
	require.NoError(t, os.WriteFile(bin, fs[binaryPath], 0o700))
	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "the image's binary runs: %s", out)
	require.Regexp(t, `(?m)^version: v?`+labelPattern(labels["org.opencontainers.image.version"])+`$`, string(out), "the binary reports the image's version")
	require.Contains(t, string(out), "commit:  "+headRevision(t))
	require.Contains(t, string(out), "go:      go1.")
}

func labelPattern(v string) string {
	return strings.NewReplacer(".", `\.`, "+", `\+`).Replace(v)
}

func TestTheImageOfOneCommitHasOneDigest(t *testing.T) {
	first, err := tarball.ImageFromPath(theImage(t), nil)
	require.NoError(t, err)
	second, err := tarball.ImageFromPath(makeImage(t, t.TempDir()), nil)
	require.NoError(t, err)
	a, err := first.Digest()
	require.NoError(t, err)
	b, err := second.Digest()
	require.NoError(t, err)
	require.Equal(t, a, b, "make image of the same commit built another digest")
}
