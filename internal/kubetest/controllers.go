package kubetest

import (
	"crypto/tls"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hpaControllers are the controllers of kube-controller-manager that move
// a Deployment through its HorizontalPodAutoscaler: the HPA controller
// sets spec.replicas, the Deployment and ReplicaSet controllers make the
// (never scheduled) pods, so status.replicas follows. The ServiceAccount
// controller is left out: CreateNamespace makes the default account,
// and a second writer would race it.
var hpaControllers = []string{
	"horizontal-pod-autoscaler-controller",
	"deployment-controller",
	"replicaset-controller",
}

// ControllerManager is a kube-controller-manager process running the
// controllers of a Deployment scaled by an HPA.
type ControllerManager struct {
	proc *process
}

// StartControllerManager runs kube-controller-manager (bin, as Unpack
// returns it) against the cluster's first API server with the admin
// token, the HPA controller syncing every hpaSync, waits until its
// /healthz answers, and kills it when the test ends. Start it after the
// custom resources it may meet are established.
func (c *Cluster) StartControllerManager(tb testing.TB, bin string, hpaSync time.Duration) *ControllerManager {
	tb.Helper()
	kubeconfig := WriteKubeconfig(tb, c.API.Config())
	m := &ControllerManager{}
	err := onFreePorts(1, func(ports []int) error {
		port := strconv.Itoa(ports[0])
		p, err := launch(bin, []string{
			"--kubeconfig", kubeconfig,
			"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
			"--controllers", strings.Join(hpaControllers, ","),
			"--horizontal-pod-autoscaler-sync-period", hpaSync.String(),
			"--leader-elect=false",
			"--secure-port", port, "--bind-address", "127.0.0.1",
		}, c.path("kube-controller-manager.log"))
		if err != nil {
			return err
		}
		m.proc = p
		// Its serving certificate is self-signed, made at start.
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true}}
		return p.waitReady("kube-controller-manager", func() error { return httpOK(client, "https://127.0.0.1:"+port+"/healthz") })
	})
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	tb.Cleanup(m.proc.Kill)
	return m
}

// Tail is the end of the controller manager's log, for failure messages.
func (m *ControllerManager) Tail() string { return m.proc.tail() }
