//go:build kube

package e2e

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/pelwarden/pelwarden/internal/helmtest"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

const (
	// EnvHPAResults names the file the HPA suite writes its replica
	// timelines to (make test-hpa HPA_RESULTS=bench/hpa-loop.json); unset,
	// it only logs them.
	EnvHPAResults = "PELWARDEN_HPA_RESULTS"
	// envHPAInNetns marks the run of the test binary inside a network
	// namespace of its own; envHPAPelwarden names the pelwarden binary
	// built before it, outside.
	envHPAInNetns   = "PELWARDEN_HPA_IN_NETNS"
	envHPAPelwarden = "PELWARDEN_HPA_PELWARDEN"
	// hpaHost is a non-loopback address on the namespace's lo: an
	// EndpointSlice refuses loopback addresses, and the aggregation layer
	// reaches KEDA's metrics adapter only through its Service's endpoints.
	hpaHost = "10.77.0.1"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// hpaBinaries are the programs the HPA suite runs, each checked before
// anything starts, so the suite fails, never skips, without one.
type hpaBinaries struct {
	operator, crdDir, adapter, controllerManager string
}

func findHPABinaries(t *testing.T) hpaBinaries {
	t.Helper()
	operator, crdDir := kedaDirs(t)
	kubeBin, err := kubetest.BinDir()
	require.NoError(t, err)
	kcm, err := kubetest.FindBinary(kubeBin, "kube-controller-manager")
	require.NoError(t, err, "make test-hpa needs KUBE_BIN with kube-controller-manager (or its .gz)")
	adapter, err := kubetest.FindBinary(filepath.Dir(operator), "keda-adapter")
	require.NoError(t, err, "make test-hpa needs KEDA_BIN with KEDA's keda-adapter (or its .gz)")
	return hpaBinaries{operator: operator, crdDir: crdDir, adapter: adapter, controllerManager: kcm}
}

// inOwnNetwork runs t inside a network namespace of its own: outside
// one, it checks what the suite needs, builds pelwarden, runs the test
// binary again for t alone under `unshare --net` with its output on this
// one's, fails t if that run fails, and returns false. Inside, it brings
// lo up with hpaHost on it and returns true. Every process of the run
// dies with the re-run binary (proctest's parent-death signal), and the
// namespace with the last of them.
func inOwnNetwork(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envHPAInNetns) != "" {
		enterNetwork(t)
		return true
	}
	findHPABinaries(t)
	require.Zero(t, os.Geteuid(), "the HPA suite runs as root: it makes a network namespace of its own (unshare --net)")
	for _, tool := range []string{"unshare", "ip"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the HPA suite needs %s (util-linux, iproute2)", tool)
	}
	// Built here, where the module proxy is reachable if the cache is cold.
	bin := proctest.Build(t, "../cmd/pelwarden")[0]
	_, err := helmtest.Build()
	require.NoError(t, err)
	args := []string{"--net", "--", os.Args[0], "-test.run", "^" + t.Name() + "$", "-test.v", "-test.count", "1"}
	if deadline, ok := t.Deadline(); ok {
		// The re-run stops first, so its own timeout names what hung.
		args = append(args, "-test.timeout", (time.Until(deadline) - 30*time.Second).Round(time.Second).String())
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), envHPAInNetns+"=1", envHPAPelwarden+"="+bin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	child, err := proctest.Run(cmd)
	require.NoError(t, err)
	t.Cleanup(child.Kill)
	<-child.Done()
	require.True(t, child.Cmd.ProcessState.Success(), "the run in its own network namespace failed: %s", child.Cmd.ProcessState)
	return false
}

// enterNetwork checks that the process is in a network namespace its
// parent is not in, so no address is added to the host's lo, then brings
// lo up with hpaHost.
func enterNetwork(t *testing.T) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/net")
	require.NoError(t, err)
	require.NotEqual(t, parent, self, "%s is set, but this process shares its parent's network namespace", envHPAInNetns)
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", hpaHost + "/32", "dev", "lo"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
}

// startKEDAAdapter runs KEDA's metrics adapter on hpaHost with the
// operator's certificate, kubeconfig and environment, and serves
// external.metrics.k8s.io through the aggregation layer: an APIService,
// a Service without a selector and the EndpointSlice that points at the
// adapter. It returns once the APIService is Available.
func startKEDAAdapter(t *testing.T, e *kedaEnv, bin string) *proctest.Proc {
	t.Helper()
	ports := freePorts(t, 2)
	file := func(name string) string { return filepath.Join(e.certDir, name) }
	// The adapter dials the operator with the certificate in --cert-dir,
	// and serves with --tls-cert-file; the defaults of --secure-port,
	// --port and --metrics-service-address are in-cluster ones.
	proc := proctest.StartEnv(t, "keda-adapter", bin, e.env,
		"--secure-port", ports[0], "--bind-address", hpaHost, "--cert-dir", e.certDir,
		"--tls-cert-file", file(tlstest.CertKey), "--tls-private-key-file", file(tlstest.KeyKey),
		"--client-ca-file", file(tlstest.CAKey),
		"--lister-kubeconfig", e.kubeconfig, "--authentication-kubeconfig", e.kubeconfig, "--authorization-kubeconfig", e.kubeconfig,
		"--metrics-service-address", e.metricsService, "--port", ports[1], "--zap-log-level", "info")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(proc.Tail(40))
		}
	})
	port, err := strconv.Atoi(ports[0])
	require.NoError(t, err)
	serveExternalMetrics(t, e, int32(port))
	eventually(t, kedaWait, func() error {
		if proc.Exited() {
			t.Fatalf("KEDA's metrics adapter exited:\n%s", proc.Tail(40))
		}
		o, err := e.dyn.Resource(apiServices).Get(context.Background(), "v1beta1.external.metrics.k8s.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := condition(o, "Available"); c["status"] != "True" {
			return fmt.Errorf("APIService not available: %v", c)
		}
		return nil
	})
	return proc
}

// serveExternalMetrics makes the objects through which the API server
// reaches the adapter on hpaHost:port, as KEDA's chart does in a cluster
// but with the endpoint written by hand (no pod, no endpoint controller).
func serveExternalMetrics(t *testing.T, e *kedaEnv, port int32) {
	t.Helper()
	ctx := context.Background()
	const name = "keda-metrics-apiserver"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "keda"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}},
	}
	_, err := e.api.admin.CoreV1().Services("keda").Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	// The aggregator resolves the Service through its EndpointSlices,
	// matching the port by name.
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "keda", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{hpaHost}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("https"), Port: new(port), Protocol: new(corev1.ProtocolTCP)}},
	}
	_, err = e.api.admin.DiscoveryV1().EndpointSlices("keda").Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1beta1.external.metrics.k8s.io"},
		"spec": map[string]any{
			"service": map[string]any{"name": name, "namespace": "keda", "port": int64(443)},
			"group":   "external.metrics.k8s.io", "version": "v1beta1",
			// The adapter's certificate names hpaHost, not the Service.
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(100), "versionPriority": int64(100),
		},
	}}
	_, err = e.dyn.Resource(apiServices).Create(ctx, apiService, metav1.CreateOptions{})
	require.NoError(t, err)
}

// moduleVersion is the version of module a Go binary was built with, as
// `go version -m` shows it, for the record of what ran.
func moduleVersion(t *testing.T, bin, module string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err, "the build information of %s", bin)
	if info.Main.Path == module {
		return info.Main.Version
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			return dep.Version
		}
	}
	return "unknown"
}
