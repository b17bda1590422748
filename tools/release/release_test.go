package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

func TestReleaseVersionsAreVThenSemVer(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		version, bare string
	}{
		"a release":                      {version: "v0.1.0", bare: "0.1.0"},
		"a prerelease":                   {version: "v1.2.0-rc.1", bare: "1.2.0-rc.1"},
		"without its v":                  {version: "0.1.0"},
		"two numbers":                    {version: "v0.1"},
		"a leading zero":                 {version: "v01.0.0"},
		"build metadata, no image tag":   {version: "v1.0.0+build.5"},
		"a describe of an untagged tree": {version: "0b3a415-dirty"},
		"empty":                          {version: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bare, err := checkVersion(tc.version)
			if tc.bare == "" {
				require.ErrorContains(t, err, "VERSION must be v<major>.<minor>.<patch>")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.bare, bare)
		})
	}
}

// gitRepo makes a repository with one commit.
func gitRepo(t *testing.T) (string, git) {
	t.Helper()
	dir := t.TempDir()
	run := gitIn(dir)
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "r@example.com"}, {"config", "user.name", "r"}} {
		_, err := run(args...)
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o600))
	for _, args := range [][]string{{"add", "a"}, {"commit", "-q", "-m", "a"}} {
		_, err := run(args...)
		require.NoError(t, err)
	}
	return dir, run
}

func TestAReleaseNeedsACleanTreeAndAFreeTag(t *testing.T) {
	t.Parallel()
	dir, run := gitRepo(t)
	tagged, err := checkTree(run, "v0.1.0")
	require.NoError(t, err)
	require.False(t, tagged)

	_, err = run("tag", "v0.1.0")
	require.NoError(t, err)
	tagged, err = checkTree(run, "v0.1.0")
	require.NoError(t, err, "a release run again on its tagged commit")
	require.True(t, tagged)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), []byte("b"), 0o600))
	_, err = checkTree(run, "v0.1.0")
	require.ErrorContains(t, err, "the working tree has changes")
	require.ErrorContains(t, err, "M a", "names the changed file")

	_, err = run("commit", "-q", "-am", "b")
	require.NoError(t, err)
	_, err = checkTree(run, "v0.1.0")
	require.ErrorContains(t, err, "tag v0.1.0 already names commit")
}

// chartCopy copies the repository's chart, with Chart.yaml's versions set
// to version.
func chartCopy(t *testing.T, version string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pelwarden")
	out, err := exec.Command("cp", "-r", filepath.Join(repoRoot(t), "charts", "pelwarden"), dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	path := filepath.Join(dir, "Chart.yaml")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "version:"):
			l = "version: " + version
		case strings.HasPrefix(l, "appVersion:"):
			l = `appVersion: "` + version + `"`
		}
		lines = append(lines, l)
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600))
	return dir
}

func TestTheChartPackagesToTheSameBytesWithItsVersions(t *testing.T) {
	t.Parallel()
	dir := chartCopy(t, "1.2.3")
	at := time.Unix(1_700_000_000, 0)
	first, err := packageChart(dir, "1.2.3", t.TempDir(), at)
	require.NoError(t, err)
	require.Equal(t, "pelwarden-1.2.3.tgz", filepath.Base(first))
	// Files touched later still package to the same archive.
	require.NoError(t, os.Chtimes(filepath.Join(dir, "values.yaml"), time.Now(), time.Now()))
	second, err := packageChart(dir, "1.2.3", t.TempDir(), at)
	require.NoError(t, err)
	a, err := os.ReadFile(first)
	require.NoError(t, err)
	b, err := os.ReadFile(second)
	require.NoError(t, err)
	require.True(t, bytes.Equal(a, b), "two packages of one chart differ")

	ch, err := loader.LoadFile(first)
	require.NoError(t, err)
	require.Equal(t, "1.2.3", ch.Metadata.Version)
	require.Equal(t, "1.2.3", ch.Metadata.AppVersion)
	for _, f := range ch.Files {
		require.False(t, strings.HasPrefix(f.Name, "ci/"), ".helmignore leaves the test values out: %s", f.Name)
	}
}

func TestTheChartIsRefusedWhenItsVersionsAreNotTheRelease(t *testing.T) {
	t.Parallel()
	_, err := packageChart(chartCopy(t, "1.2.3"), "1.2.4", t.TempDir(), time.Unix(0, 0))
	require.ErrorContains(t, err, `has version "1.2.3" and appVersion "1.2.3"; a release of 1.2.4 needs both "1.2.4"`)
}

func TestTheRepositorysChartNamesOneVersion(t *testing.T) {
	t.Parallel()
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), "charts", "pelwarden"))
	require.NoError(t, err)
	require.Equal(t, ch.Metadata.Version, ch.Metadata.AppVersion, "chart version = appVersion = image tag")
	require.NoError(t, ch.Validate())
	image, ok := ch.Values["image"].(map[string]any)
	require.True(t, ok)
	require.Equal(t, "ghcr.io/pelwarden/pelwarden", image["repository"], "the repository make release's image is named for (IMAGE_REPO)")
	require.Empty(t, image["tag"], "an empty tag deploys appVersion")
}

func TestSumsListEveryFileInNameOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.tgz"), []byte("chart"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.tar"), []byte("image"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	require.NoError(t, writeSums(dir))
	require.NoError(t, writeSums(dir), "a second run leaves the sums out of the sums")
	got, err := os.ReadFile(filepath.Join(dir, sumsFile))
	require.NoError(t, err)
	require.Equal(t, "6105d6cc76af400325e94d588ce511be5bfdbb73b437dc51eca43917d7a43e3d  a.tar\n"+
		"cc57fc1903e444cf6a726490b43b27ee9f87facc037f86872201847c565b45fb  b.tgz\n", string(got))
}
