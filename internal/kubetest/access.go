package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CreateNamespace creates a namespace with labels, and the default
// ServiceAccount in it: with no controller-manager nobody else does, and
// pod admission looks it up.
func CreateNamespace(tb testing.TB, client kubernetes.Interface, name string, labels map[string]string) {
	tb.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("kubetest: create namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("kubetest: create ServiceAccount %s/default: %v", name, err)
	}
}

// ServiceAccountConfig is a client configuration for server that
// authenticates as the ServiceAccount namespace/name, with a token from the
// TokenRequest API (what `kubectl create token` does). The account's RBAC
// decides what it may do.
func ServiceAccountConfig(tb testing.TB, server *APIServer, namespace, name string) *rest.Config {
	tb.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}
	tok, err := server.Client(tb).CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, req, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("kubetest: token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg := server.Config()
	cfg.BearerToken = tok.Status.Token
	return cfg
}

// WriteKubeconfig writes cfg (server, CA and token) as a kubeconfig file in
// a temporary directory and returns its path.
func WriteKubeconfig(tb testing.TB, cfg *rest.Config) string {
	tb.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	kc.CurrentContext = "kubetest"
	path := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		tb.Fatalf("kubetest: write kubeconfig: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	return path
}
