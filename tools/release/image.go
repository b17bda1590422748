package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// nonroot is the image's user and group (distroless's nonroot), which the
// chart's securityContext runs as.
const (
	nonroot     = 65532
	nonrootUser = "65532:65532"
)

// Paths inside the image.
const (
	binaryPath = "pelwarden"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
)

// imageOptions are the inputs of an image: the same ones give the same
// digest.
type imageOptions struct {
	// Binary is the static pelwarden binary for OS linux and Arch.
	Binary string
	Arch   string
	// Version is the image's version label and tag, Revision the commit
	// it was built from, Source the repository's address.
	Version, Revision, Source string
	// Created stamps the config, the history and every file; the commit's
	// time keeps a rebuild of the same commit byte for byte the same.
	Created time.Time
}

// labels are the image's OCI annotations, as config labels.
func (o imageOptions) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "pelwarden",
		"org.opencontainers.image.description": "Ghost-aware KEDA external scaler and PEL hygiene for Redis Streams consumer groups",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// buildImage makes the image in memory: a base layer (the nonroot user
// and a CA bundle) under a layer with the binary, so a new release
// uploads only the binary's layer.
func buildImage(o imageOptions) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("-binary: %w", err)
	}
	base, err := tarLayer(o.Created, baseFiles())
	if err != nil {
		return nil, err
	}
	top, err := tarLayer(o.Created, []file{{name: binaryPath, mode: 0o755, body: bin}})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created.UTC()}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "pelwarden release: nonroot user and CA bundle", Comment: "CA bundle from golang.org/x/crypto/x509roots/fallback"}},
		mutate.Addendum{Layer: top, History: v1.History{Created: created, CreatedBy: "pelwarden release: /pelwarden"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, created
	cf.Config = v1.Config{
		User:       nonrootUser,
		Entrypoint: []string{"/" + binaryPath},
		Cmd:        []string{"serve"},
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/" + caPath},
		// 9090: gRPC (KEDA ExternalScaler, Admin, health); 8080: /metrics,
		// /healthz, /readyz.
		ExposedPorts: map[string]struct{}{"9090/tcp": {}, "8080/tcp": {}},
		Labels:       o.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// writeImage writes img as a tarball that docker load, crane push and
// skopeo's docker-archive transport read, tagged ref.
func writeImage(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("-ref: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: build output others read
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// file is one regular file or directory of a layer.
type file struct {
	name string
	mode int64
	dir  bool
	body []byte
	// owner is nonroot rather than root.
	nonroot bool
}

// baseFiles are what a static binary needs from an operating system: who
// it runs as, somewhere to write temporary files, and the roots that
// verify a TLS server (a Redis or Kubernetes API over TLS).
func baseFiles() []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" //nolint:gosec // G101: /etc/passwd lines, no password
	group := "root:x:0:\nnonroot:x:65532:\n"
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: caPath, mode: 0o644, body: caBundle()},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/nonroot", mode: 0o700, dir: true, nonroot: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// caBundle is the PEM bundle of the roots pinned in go.mod's version of
// x509roots/fallback (Mozilla's NSS store). A root NSS trusts only for
// certificates issued before a date cannot say so in PEM; it is left out
// rather than trusted for every date.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// tarLayer makes a layer of files, in order, every header stamped with at
// and owned by root (or nonroot), so nothing of the build machine (its
// clock, users, umask) reaches the digest.
func tarLayer(at time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: at.UTC(), Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.dir {
			h.Typeflag, h.Name, h.Size = tar.TypeDir, f.name+"/", 0
		}
		if f.nonroot {
			h.Uid, h.Gid = nonroot, nonroot
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
