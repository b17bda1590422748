package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Pods lists and watches the pods of a namespace: all the kubernetes
// source asks of the API server.
type Pods interface {
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// NewClient connects to the Kubernetes API: through the kubeconfig file
// when one is named, otherwise as the pod's service account, at most qps
// requests a second with bursts of burst. client-go's default limit (5,
// 10) queues a new pod set's list behind every other set's: with a few
// hundred sets starting or failing, a new one waited tens of seconds.
//
// It is a REST client for core/v1 alone, not a clientset: a clientset
// links and registers every API group Kubernetes has, which costs the
// process about 9 MB of memory and its binary 14 MB, for the one resource
// pelwarden reads. Its requests are the ones client-go's typed pods client
// makes.
func NewClient(kubeconfig, userAgent string, qps float32, burst int) (Pods, error) {
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
	cfg.QPS, cfg.Burst = qps, burst
	return newRESTPods(cfg)
}

// restPods is Pods over the API server's REST interface.
type restPods struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

func newRESTPods(cfg *rest.Config) (*restPods, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("kubernetes: core/v1 scheme: %w", err)
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &restPods{client: client, params: runtime.NewParameterCodec(scheme)}, nil
}

func (p *restPods) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.client.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, p.params).
		Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

func (p *restPods) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.client.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, p.params).
		Timeout(timeoutOf(opts)).Watch(ctx)
}

// timeoutOf is the request's own timeout, as the API server is told it in
// timeoutSeconds; zero is none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// PodClient is one namespace's pods as client-go's typed client offers
// them.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// PodsFrom adapts a clientset's pods, clientset.CoreV1().Pods, to Pods:
// client-go's fake clientset in tests, through the same reflector.
func PodsFrom[P PodClient](pods func(namespace string) P) Pods { return podsFunc[P](pods) }

type podsFunc[P PodClient] func(namespace string) P

func (f podsFunc[P]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	return f(namespace).List(ctx, opts)
}

func (f podsFunc[P]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return f(namespace).Watch(ctx, opts)
}
