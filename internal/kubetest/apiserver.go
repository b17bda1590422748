package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pelwarden/pelwarden/internal/proctest"
)

// restartAttempts is how often a restart retries its fixed port while the
// killed server's socket is still being released.
const restartAttempts = 20

// APIServer is one kube-apiserver process of a Cluster. Its port stays the
// same across Kill and Restart, so clients configured for it reconnect.
type APIServer struct {
	c    *Cluster
	n    int
	port int

	mu   sync.Mutex
	proc *process
}

// StartAPIServer starts another API server on the cluster's etcd, on a
// port of its own, and waits until it is ready: with the first, an HA pair.
func (c *Cluster) StartAPIServer(tb testing.TB) *APIServer {
	tb.Helper()
	c.mu.Lock()
	s := &APIServer{c: c, n: len(c.servers)}
	c.servers = append(c.servers, s)
	c.mu.Unlock()
	err := onFreePorts(1, func(ports []int) error {
		s.port = ports[0]
		return s.launch()
	})
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	return s
}

// URL is the server's https address.
func (s *APIServer) URL() string { return "https://127.0.0.1:" + strconv.Itoa(s.port) }

// Config is an admin client configuration for this server.
func (s *APIServer) Config() *rest.Config {
	return &rest.Config{
		Host:            s.URL(),
		BearerToken:     s.c.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.c.CA.CertPEM},
		// The tests create and patch objects in bursts; client-side
		// throttling would only slow them down.
		QPS: 200, Burst: 400,
		Timeout: 30 * time.Second,
	}
}

// Client is an admin clientset for this server.
func (s *APIServer) Client(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	client, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	return client
}

// Kill ends the server with SIGKILL, as a crash would: open watches break
// at once, without the drain a SIGTERM starts.
func (s *APIServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.Exited() {
		s.proc.Kill()
	}
}

// Restart starts the server again on its port, killing it first if it
// runs, and waits until it is ready.
func (s *APIServer) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	var err error
	for range restartAttempts {
		if err = s.launch(); !errors.Is(err, proctest.ErrPortTaken) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("kubetest: restart: %v", err)
	}
}

// WaitReady waits until the server answers /readyz.
func (s *APIServer) WaitReady(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		tb.Fatal(errNoServer)
	}
	if err := p.waitReady(s.name(), s.probe); err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
}

// Ready reports whether the server answers /readyz now.
func (s *APIServer) Ready() bool { return s.probe() == nil }

func (s *APIServer) name() string { return fmt.Sprintf("kube-apiserver %d on %s", s.n, s.URL()) }

func (s *APIServer) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.c
	args := []string{
		"--etcd-servers", c.etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(s.port),
		"--cert-dir", c.path(fmt.Sprintf("apiserver-%d", s.n)),
		"--tls-cert-file", c.path("serving.crt"), "--tls-private-key-file", c.path("serving.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-signing-key-file", c.path("sa.key"),
		"--service-account-key-file", c.path("sa.pub"),
		"--authorization-mode", "RBAC",
		"--token-auth-file", c.path("tokens.csv"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--allow-privileged",
	}
	if c.opts.Aggregation {
		args = append(args, c.aggregationFlags()...)
	}
	p, err := launch(filepath.Join(c.bin, "kube-apiserver"), args, c.path(fmt.Sprintf("apiserver-%d.log", s.n)))
	if err != nil {
		return err
	}
	s.proc = p
	return p.waitReady(s.name(), s.probe)
}

// frontProxyClient is the name the API server's front-proxy certificate
// carries, the one name extension servers accept it under.
const frontProxyClient = "front-proxy-client"

// aggregationFlags are what the aggregation layer needs of the API server.
// --client-ca-file publishes a client CA in
// kube-system/extension-apiserver-authentication, without which
// kube-controller-manager's authentication logs a missing bundle again
// and again.
func (c *Cluster) aggregationFlags() []string {
	return []string{
		"--client-ca-file", c.path("client-ca.crt"),
		"--enable-aggregator-routing=true",
		"--requestheader-client-ca-file", c.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names", frontProxyClient,
		"--requestheader-username-headers", "X-Remote-User",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", c.path("front-proxy-client.crt"),
		"--proxy-client-key-file", c.path("front-proxy-client.key"),
	}
}

// probe asks /readyz with the admin token, over TLS verified by the CA.
func (s *APIServer) probe() error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.c.CA.CertPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	req, err := http.NewRequest(http.MethodGet, s.URL()+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.c.AdminToken)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// serviceAccountKeys makes the key pair that signs and verifies service
// account tokens.
func serviceAccountKeys() (private, public []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	private = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	public = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return private, public, nil
}
