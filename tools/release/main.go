// Command release builds what a pelwarden release ships, with no Docker
// daemon and no helm binary: the container image as a tarball, the
// packaged chart and their checksums. The Makefile runs it (make image,
// make release); see docs/release.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage:
  release image -binary FILE -arch ARCH -ref REPO:TAG -version V -revision SHA -source URL -created UNIX -o FILE
  release check -version vX.Y.Z [-repo DIR]
  release chart -chart DIR -version X.Y.Z -created UNIX -o DIR
  release sums DIR
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "image":
		err = imageCommand(args[1:], stdout)
	case "check":
		err = checkCommand(args[1:], stdout)
	case "chart":
		err = chartCommand(args[1:], stdout)
	case "sums":
		if len(args) != 2 {
			err = errors.New("sums takes one directory")
		} else {
			err = writeSums(args[1])
		}
	default:
		err = fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
	if err != nil {
		fmt.Fprintf(stderr, "release %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func imageCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o imageOptions
	var ref, out string
	var created int64
	fs.StringVar(&o.Binary, "binary", "", "the static linux binary")
	fs.StringVar(&o.Arch, "arch", "amd64", "the binary's GOARCH")
	fs.StringVar(&ref, "ref", "", "the image's name in the tarball, repository:tag")
	fs.StringVar(&o.Version, "version", "", "org.opencontainers.image.version")
	fs.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision: the commit")
	fs.StringVar(&o.Source, "source", "", "org.opencontainers.image.source: the repository's address")
	fs.Int64Var(&created, "created", 0, "the commit's time, Unix seconds: the image's and its files' time")
	fs.StringVar(&out, "o", "", "the tarball to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Binary == "" || ref == "" || out == "" || o.Version == "" || o.Revision == "" {
		return errors.New("-binary, -ref, -version, -revision and -o are required")
	}
	o.Created = time.Unix(created, 0)
	img, err := buildImage(o)
	if err != nil {
		return err
	}
	if err := writeImage(out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "image %s %s\n  written to %s\n", ref, digest, out)
	return err
}

func checkCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	version := fs.String("version", "", "the release, vX.Y.Z")
	repo := fs.String("repo", ".", "the repository")
	chartDir := fs.String("chart", "charts/pelwarden", "the chart, relative to -repo")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bare, err := checkVersion(*version)
	if err != nil {
		return err
	}
	tagged, err := checkTree(gitIn(*repo), *version)
	if err != nil {
		return err
	}
	if err := checkChartVersion(*repo+"/"+*chartDir, bare); err != nil {
		return err
	}
	state := "not yet tagged"
	if tagged {
		state = "tagged at HEAD already"
	}
	_, err = fmt.Fprintf(stdout, "release %s: clean tree, %s; chart, appVersion and image tag %s\n", *version, state, bare)
	return err
}

func chartCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	dir := fs.String("chart", "", "the chart's directory")
	version := fs.String("version", "", "the chart's version, X.Y.Z")
	created := fs.String("created", "0", "the commit's time, Unix seconds: the files' time in the archive")
	out := fs.String("o", "", "the directory to write the archive in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	at, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	path, err := packageChart(*dir, *version, *out, time.Unix(at, 0))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "chart %s\n", path)
	return err
}
