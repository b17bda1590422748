//go:build kube

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/pelwarden/pelwarden/internal/helmtest"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// EnvKEDABin names the directory holding KEDA's operator binary
// (keda-operator); EnvKEDACRDs the directory of KEDA's CRDs, by default
// crds beside it.
const (
	EnvKEDABin  = "PELWARDEN_KEDA_BIN"
	EnvKEDACRDs = "PELWARDEN_KEDA_CRDS"
)

var (
	scaledObjects = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
	crds          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// kedaDirs returns KEDA's operator binary and CRD directory, failing (never
// skipping) when either is missing.
func kedaDirs(t *testing.T) (operator, crdDir string) {
	t.Helper()
	bin := os.Getenv(EnvKEDABin)
	require.NotEmpty(t, bin, "%s is not set: run make test-keda KUBE_BIN=<etcd, kube-apiserver> KEDA_BIN=<keda-operator>", EnvKEDABin)
	bin, err := filepath.Abs(bin)
	require.NoError(t, err)
	operator = filepath.Join(bin, "keda-operator")
	fi, err := os.Stat(operator)
	require.NoError(t, err, "%s=%s has no keda-operator", EnvKEDABin, bin)
	require.NotZero(t, fi.Mode()&0o111, "%s is not executable", operator)
	crdDir = os.Getenv(EnvKEDACRDs)
	if crdDir == "" {
		crdDir = filepath.Join(filepath.Dir(bin), "crds")
	}
	matches, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	require.NoError(t, err)
	require.Len(t, matches, 6, "%s holds KEDA's six CRDs (set %s)", crdDir, EnvKEDACRDs)
	return operator, crdDir
}

// kedaEnv is a real API server with KEDA's CRDs and operator, and the
// clients the scenarios use.
type kedaEnv struct {
	api      *realAPI
	dyn      dynamic.Interface
	operator *proctest.Proc
	// kubeconfig, env and certDir are the operator's, which KEDA's
	// metrics adapter shares; metricsService is where the operator serves
	// the adapter its metrics over mutual TLS.
	kubeconfig     string
	env            []string
	certDir        string
	metricsService string
}

// startKEDA applies the CRDs of crdDir to api and runs KEDA's operator
// binary against it as a process with an admin kubeconfig, with the flags
// and environment KEDA's operator needs outside a cluster. Its metrics
// service for KEDA's adapter listens on host.
func startKEDA(t *testing.T, api *realAPI, operator, crdDir, host string) *kedaEnv {
	t.Helper()
	cfg := api.cluster.API.Config()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	applyCRDs(t, dyn, crdDir)
	kubetest.CreateNamespace(t, api.admin, "keda", nil)

	// One certificate serves the metrics service and is the adapter's
	// client certificate, which the operator requires.
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "keda-metrics-service")
	serving := ca.Peer(t, host, "127.0.0.1", "localhost")
	for name, data := range tlstest.ServerFiles(serving, ca) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	caDir := t.TempDir()
	kubeconfig := kubetest.WriteKubeconfig(t, cfg)
	ports := freePorts(t, 3)
	env := []string{"KUBECONFIG=" + kubeconfig, "WATCH_NAMESPACE=", "POD_NAMESPACE=keda",
		"KEDA_CLUSTER_OBJECT_NAMESPACE=keda", "OPERATOR_NAME=keda-operator"}
	metricsService := net.JoinHostPort(host, ports[2])
	proc := proctest.StartEnv(t, "keda-operator", operator, env, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "127.0.0.1:"+ports[0], "--health-probe-bind-address", "127.0.0.1:"+ports[1],
		"--metrics-service-bind-address", metricsService, "--cert-dir", dir, "--ca-dir", caDir, "--zap-log-level", "info")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(proc.Tail(60))
		}
	})
	eventually(t, time.Minute, func() error {
		if proc.Exited() {
			t.Fatalf("KEDA's operator exited:\n%s", proc.Tail(40))
		}
		return httpGet("http://127.0.0.1:" + ports[1] + "/readyz")
	})
	return &kedaEnv{api: api, dyn: dyn, operator: proc, kubeconfig: kubeconfig, env: env, certDir: dir, metricsService: metricsService}
}

func freePorts(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		p, err := proctest.FreePort()
		require.NoError(t, err)
		out[i] = strconv.Itoa(p)
	}
	return out
}

func httpGet(url string) error {
	resp, err := http.Get(url) //nolint:noctx // a loopback URL the test built, polled until it answers
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// applyCRDs creates every CRD of dir (ScaledJob's is larger than a
// client-side apply's annotation may be, so they are created, not
// applied) and waits until each is established.
func applyCRDs(t *testing.T, dyn dynamic.Interface, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	ctx := context.Background()
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		objs, err := kubetest.Decode(string(raw))
		require.NoError(t, err)
		for _, o := range objs {
			_, err := dyn.Resource(crds).Create(ctx, o, metav1.CreateOptions{})
			require.NoError(t, err, f)
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		eventually(t, 30*time.Second, func() error {
			o, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := condition(o, "Established"); c["status"] != "True" {
				return fmt.Errorf("CRD %s not established: %v", name, c)
			}
			return nil
		})
	}
}

// condition returns the status condition of type typ of obj, or nil.
func condition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return m
		}
	}
	return nil
}

// loadExample reads one object of the first install (the chart's
// examples), the file docs/getting-started.md shows.
func loadExample(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(firstInstallDir, name))
	require.NoError(t, err)
	objs, err := kubetest.Decode(string(raw))
	require.NoError(t, err)
	require.Len(t, objs, 1, name)
	return objs[0]
}

// createDeployment makes a Deployment at zero replicas for KEDA to scale;
// no kubelet runs, so only spec.replicas moves.
func createDeployment(t *testing.T, e *kedaEnv, namespace, name string) {
	t.Helper()
	createDeploymentAt(t, e, namespace, name, 0)
}

// createDeploymentAt makes a Deployment at replicas.
func createDeploymentAt(t *testing.T, e *kedaEnv, namespace, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:1"}}},
			},
		},
	}
	_, err := e.api.admin.AppsV1().Deployments(namespace).Create(context.Background(), d, metav1.CreateOptions{})
	require.NoError(t, err)
}

// replicas is a Deployment's spec.replicas.
func (e *kedaEnv) replicas(namespace, name string) (int32, error) {
	d, err := e.api.admin.AppsV1().Deployments(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return -1, err
	}
	if d.Spec.Replicas == nil {
		return 1, nil
	}
	return *d.Spec.Replicas, nil
}

// scaledObject reads a ScaledObject.
func (e *kedaEnv) scaledObject(namespace, name string) (*unstructured.Unstructured, error) {
	return e.dyn.Resource(scaledObjects).Namespace(namespace).Get(context.Background(), name, metav1.GetOptions{})
}

// create sends obj, which must be new.
func (e *kedaEnv) create(t *testing.T, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	t.Helper()
	_, err := e.dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(context.Background(), obj, metav1.CreateOptions{})
	require.NoError(t, err, "create %s %s", obj.GetKind(), obj.GetName())
}

// updateTrigger changes the metadata of a ScaledObject's first trigger,
// retrying on conflicts with KEDA's own status writes.
func (e *kedaEnv) updateTrigger(t *testing.T, namespace, name string, change func(md map[string]any)) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		so, err := e.scaledObject(namespace, name)
		if err != nil {
			return err
		}
		triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
		md := triggers[0].(map[string]any)["metadata"].(map[string]any)
		change(md)
		if err := unstructured.SetNestedSlice(so.Object, triggers, "spec", "triggers"); err != nil {
			return err
		}
		_, err = e.dyn.Resource(scaledObjects).Namespace(namespace).Update(context.Background(), so, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return err
		}
		require.NoError(t, err)
		return nil
	})
}

// events returns the reasons and messages of the events about a
// ScaledObject.
func (e *kedaEnv) events(t *testing.T, namespace, name string) []string {
	t.Helper()
	list, err := e.api.admin.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=ScaledObject,involvedObject.name=" + name,
	})
	require.NoError(t, err)
	var out []string
	for _, ev := range list.Items {
		out = append(out, fmt.Sprintf("%s %s (x%d): %s", ev.Type, ev.Reason, max(ev.Count, 1), ev.Message))
	}
	return out
}

// pelwardenValues are the chart values the suite renders pelwarden's
// configuration from: the first install's (examples/values.yaml: mutual
// TLS on gRPC, and the trigger policy that lets namespace jobs name the
// workers profile and enroll its stream), with the test's Redis, the pod
// watch through a kubeconfig, and thresholds short enough that the
// scenarios take seconds.
func pelwardenValues(t *testing.T, redisAddr string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(firstInstallDir, "values.yaml"))
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &v))
	v["redis"] = []any{map[string]any{"name": "default", "addr": redisAddr,
		"dialTimeout": "300ms", "readTimeout": "300ms", "writeTimeout": "300ms"}}
	v["kubernetes"] = map[string]any{"enabled": true, "kubeconfig": "/etc/pelwarden/kubeconfig"}
	v["scaler"] = map[string]any{"freshness": "200ms", "requestTimeout": "1s"}
	v["hygiene"] = map[string]any{"scanInterval": "1s", "leaseTTL": "3s"}
	v["grpc"].(map[string]any)["shutdownTimeout"] = "2s"
	tr := v["triggers"].(map[string]any)
	tr["warmUp"] = "3s"
	tr["floors"] = map[string]any{"entryStale": "1s", "ghostIdle": "1s", "heartbeatMaxAge": "1s", "podDeletionGrace": "1s", "maxDeliveries": 3}
	profiles := tr["profiles"].(map[string]any)
	profiles["workers"].(map[string]any)["heartbeatMaxAgeSeconds"] = "3"
	// A profile no rule lets a namespace name yet (PolicyAdmits).
	profiles["batch"] = map[string]any{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "3"}
	return v
}

// pelwardenProc is pelwarden run as a process from the chart's rendered
// configuration.
type pelwardenProc struct {
	*proctest.Proc
	grpcAddr, httpAddr string
}

// startPelwardenFromChart renders the chart with values, lays out the
// files its projected volume would mount (config.yaml from the ConfigMap,
// the gRPC TLS Secret, the kubeconfig) in a directory standing for
// /etc/pelwarden, and runs the pelwarden binary on it with the chart's
// arguments, on loopback ports: those of at, when given, as a rollout's
// new pod behind the same Service.
func startPelwardenFromChart(t *testing.T, bin string, values map[string]any, files map[string][]byte, at *pelwardenProc) *pelwardenProc {
	t.Helper()
	helm, err := helmtest.Build()
	require.NoError(t, err)
	raw, err := yaml.Marshal(values)
	require.NoError(t, err)
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, raw, 0o600))
	stream, err := helm.Template(t, chartRelease, chartNamespace, "--values", valuesFile)
	require.NoError(t, err)
	objs, err := kubetest.Decode(stream)
	require.NoError(t, err)
	var config, args string
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			if c, ok, _ := unstructured.NestedString(o.Object, "data", "config.yaml"); ok {
				config = c
			}
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			a, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			args = strings.Join(a, " ")
		}
	}
	require.NotEmpty(t, config, "the chart renders config.yaml")
	require.Equal(t, "serve --config /etc/pelwarden/config.yaml", args, "the chart's arguments")
	dir := t.TempDir()
	files["config.yaml"] = []byte(strings.ReplaceAll(config, "/etc/pelwarden/", dir+"/"))
	for name, data := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, data, 0o600))
	}
	p := &pelwardenProc{}
	if at != nil {
		p.grpcAddr, p.httpAddr = at.grpcAddr, at.httpAddr
	} else {
		ports := freePorts(t, 2)
		p.grpcAddr, p.httpAddr = "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[1]
	}
	p.Proc = proctest.Start(t, "pelwarden", bin, "serve", "--config", filepath.Join(dir, "config.yaml"),
		"--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(p.Tail(60))
		}
	})
	eventually(t, 30*time.Second, func() error {
		if p.Exited() {
			t.Fatalf("pelwarden exited:\n%s", p.Tail(40))
		}
		return httpGet("http://" + p.httpAddr + "/readyz")
	})
	return p
}
