package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// fieldManager owns what the harness applies.
const fieldManager = "kubetest"

// Decode splits a YAML stream (such as `helm template` output) into its
// objects, leaving out documents that hold only comments.
func Decode(stream string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), len(doc)).Decode(&obj.Object); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, doc)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// ErrNotServed marks an object whose kind the API server does not serve,
// such as a custom resource whose CRD is not installed.
var ErrNotServed = errors.New("kind not served")

// Applier sends objects to one API server with server-side apply, as
// `kubectl apply --server-side` does.
type Applier struct {
	client dynamic.Interface
	mapper meta.RESTMapper
	// DryRun applies with dryRun=All: the server runs defaulting,
	// validation and admission (RBAC, PodSecurity) and stores nothing.
	DryRun bool
	// Namespace is used for namespaced objects that name none.
	Namespace string
}

// NewApplier reads the server's API groups, so kinds map to resources.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{client: client, mapper: restmapper.NewDiscoveryRESTMapper(groups), Namespace: "default"}, nil
}

// Apply applies obj. An unserved kind gives an error wrapping ErrNotServed.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s %s: %w", gvk, obj.GetName(), ErrNotServed)
	}
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = a.client.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = a.Namespace
		}
		ri = a.client.Resource(mapping.Resource).Namespace(ns)
	}
	body, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: new(true)}
	if a.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("%s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ApplyAll applies every object and returns the kinds not served, and
// every other failure joined.
func (a *Applier) ApplyAll(ctx context.Context, objs []*unstructured.Unstructured) (notServed []schema.GroupVersionKind, err error) {
	var errs []error
	for _, obj := range objs {
		switch err := a.Apply(ctx, obj); {
		case errors.Is(err, ErrNotServed):
			notServed = append(notServed, obj.GroupVersionKind())
		case err != nil:
			errs = append(errs, err)
		}
	}
	return notServed, errors.Join(errs...)
}
