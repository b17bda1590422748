package kube

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient connects to the Kubernetes API: through the kubeconfig file
// when one is named, otherwise as the pod's service account.
func NewClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w (set kubernetes.kubeconfig when pelwarden runs outside a cluster)", err)
	}
	cfg.UserAgent = userAgent
	return kubernetes.NewForConfig(cfg)
}
