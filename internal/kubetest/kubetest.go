// Package kubetest runs a real Kubernetes API server for tests and
// benchmarks, as internal/redistest does for Redis: etcd and kube-apiserver
// child processes on free loopback ports, with their data in a private
// directory. No kubelet and no controllers run, so pods never start, but
// they can be created, given a status, deleted and watched: all that a
// pod-watch liveness source sees.
//
// The binaries come from the directory EnvBin names (make test-kube sets
// it). The tests that use this package are built with the kube tag, so
// plain `go test ./...` needs no binaries; once built, a missing directory
// or binary fails the test, never skips it.
package kubetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// EnvBin names the directory holding the etcd and kube-apiserver binaries.
const EnvBin = "PELWARDEN_KUBE_BIN"

// Cluster is one etcd and the API servers in front of it. Every API server
// serves the same certificate, issued by CA for 127.0.0.1, and accepts the
// same admin token, so one client configuration fits any of them.
type Cluster struct {
	bin  string
	dir  string
	opts Options
	// CA issued the API servers' serving certificate.
	CA *tlstest.CA
	// AdminToken authenticates as a member of system:masters.
	AdminToken string

	etcd    *process
	etcdURL string
	// API is the first API server.
	API *APIServer

	mu      sync.Mutex
	servers []*APIServer
}

// Options change what the API servers of a Cluster serve.
type Options struct {
	// Aggregation serves the API groups of extension servers, such as
	// KEDA's metrics adapter, through the aggregation layer: the API
	// server authenticates to them with a front-proxy client certificate
	// whose CA they trust from kube-system/extension-apiserver-authentication,
	// and dials a Service's endpoints rather than its cluster IP, which
	// nothing routes without kube-proxy.
	Aggregation bool
}

// Start runs etcd and one API server, waits until the API server is ready,
// and stops both when the test ends. It fails the test, with the log tail
// of what did not start, if the binaries are missing or a server does not
// come up.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with the API servers run as opts says.
func StartWith(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	bin, err := BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{bin: bin, dir: tb.TempDir(), opts: opts, CA: tlstest.NewCA(tb, "kubetest")}
	if err := c.prepare(tb); err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	// Registered after TempDir, so the servers are gone before their
	// directory is removed.
	tb.Cleanup(c.close)
	if err := c.startEtcd(); err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	c.API = c.StartAPIServer(tb)
	return c
}

// BinDir returns the directory EnvBin names, after checking that it holds
// both binaries.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBin)
	if dir == "" {
		return "", fmt.Errorf("kubetest: %s is not set: run the real-API suite with make test-kube KUBE_BIN=<directory with etcd and kube-apiserver>", EnvBin)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("kubetest: %s=%s: %w", EnvBin, dir, err)
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fi, err := os.Stat(filepath.Join(abs, name))
		if err != nil {
			return "", fmt.Errorf("kubetest: %s=%s has no %s: %w", EnvBin, dir, name, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("kubetest: %s in %s is not an executable file", name, abs)
		}
	}
	return abs, nil
}

// prepare writes the files every API server shares: the serving
// certificate, the service-account key pair and the token file.
func (c *Cluster) prepare(tb testing.TB) error {
	serving := c.CA.Server(tb, "127.0.0.1", "localhost")
	saKey, saPub, err := serviceAccountKeys()
	if err != nil {
		return err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	c.AdminToken = hex.EncodeToString(token)
	files := map[string][]byte{
		"serving.crt": serving.CertPEM,
		"serving.key": serving.KeyPEM,
		"sa.key":      saKey,
		"sa.pub":      saPub,
		"tokens.csv":  []byte(c.AdminToken + `,admin,admin-uid,"system:masters"` + "\n"),
	}
	if c.opts.Aggregation {
		proxyCA := tlstest.NewCA(tb, "kubetest-front-proxy")
		client := proxyCA.Client(tb, frontProxyClient)
		files["client-ca.crt"] = c.CA.CertPEM
		files["front-proxy-ca.crt"] = proxyCA.CertPEM
		files["front-proxy-client.crt"] = client.CertPEM
		files["front-proxy-client.key"] = client.KeyPEM
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *Cluster) startEtcd() error {
	return onFreePorts(2, func(ports []int) error {
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		p, err := launch(filepath.Join(c.bin, "etcd"), []string{
			"--name", "kubetest",
			"--data-dir", c.path("etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "kubetest=" + peer,
			// Test data need not survive a power cut; fsync on a busy
			// disk would slow every write.
			"--unsafe-no-fsync",
		}, c.path("etcd.log"))
		if err != nil {
			return err
		}
		if err := p.waitReady("etcd", func() error { return httpOK(http.DefaultClient, client+"/health") }); err != nil {
			return err
		}
		c.etcd, c.etcdURL = p, client
		return nil
	})
}

// close kills every API server, then etcd.
func (c *Cluster) close() {
	c.mu.Lock()
	servers := c.servers
	c.mu.Unlock()
	for _, s := range servers {
		s.Kill()
	}
	if c.etcd != nil {
		c.etcd.Kill()
	}
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

var errNoServer = errors.New("the API server is not running")
