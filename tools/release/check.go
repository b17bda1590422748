package main

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// releaseVersion is the form a release's version takes: v, then SemVer
// without build metadata, which an image tag cannot hold ('+').
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// checkVersion says whether version is a release's version, and returns
// the version the chart and the image carry: the same without the v, as
// Helm wants a chart's version.
func checkVersion(version string) (string, error) {
	if !releaseVersion.MatchString(version) {
		return "", fmt.Errorf("VERSION must be v<major>.<minor>.<patch>, with an optional -prerelease (v0.1.0, v1.2.0-rc.1), got %q", version)
	}
	return strings.TrimPrefix(version, "v"), nil
}

// git runs git in dir and returns its trimmed output.
type git func(args ...string) (string, error)

func gitIn(dir string) git {
	return func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output() //nolint:gosec // G204: git with fixed subcommands
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(exit.Stderr)))
		}
		return strings.TrimSpace(string(out)), err
	}
}

// checkTree refuses a release from a tree with changes git would not
// have tagged, or whose tag already names another commit. It reports
// whether the tag exists already (on HEAD: a release run again).
func checkTree(run git, version string) (tagged bool, err error) {
	dirty, err := run("status", "--porcelain")
	if err != nil {
		return false, err
	}
	if dirty != "" {
		return false, fmt.Errorf("the working tree has changes; a release is built from a commit alone:\n%s", dirty)
	}
	head, err := run("rev-parse", "HEAD")
	if err != nil {
		return false, err
	}
	at, err := run("rev-parse", "-q", "--verify", "refs/tags/"+version+"^{commit}")
	if err != nil || at == "" {
		return false, nil //nolint:nilerr // rev-parse -q --verify fails quietly when the tag does not exist
	}
	if at != head {
		return false, fmt.Errorf("tag %s already names commit %s, not HEAD (%s)", version, at, head)
	}
	return true, nil
}
