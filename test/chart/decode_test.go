package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// strictDecoder decodes a manifest into its typed API object and fails on a
// field the type does not have, a field spelled in another case, or a field
// given twice: the mistakes the API server would drop or reject.
var strictDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// object is one rendered manifest, decoded.
type object interface {
	runtime.Object
	GetName() string
	GetNamespace() string
}

// splitDocuments splits a YAML stream into its non-empty documents.
func splitDocuments(stream string) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if isBlank(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

// isBlank reports whether a document holds only comments and whitespace, as
// a template that renders nothing does.
func isBlank(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// decodeManifests decodes every document of a `helm template` stream.
func decodeManifests(stream string) ([]object, error) {
	docs, err := splitDocuments(stream)
	if err != nil {
		return nil, err
	}
	objs := make([]object, 0, len(docs))
	var errs []error
	for i, doc := range docs {
		obj, err := decodeStrict(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w\n%s", i, err, doc))
			continue
		}
		objs = append(objs, obj)
	}
	return objs, errors.Join(errs...)
}

// decodeStrict decodes one manifest and checks the names Kubernetes would
// refuse.
func decodeStrict(doc []byte) (object, error) {
	raw, gvk, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	obj, ok := raw.(object)
	if !ok {
		return nil, fmt.Errorf("%s has no object metadata", gvk)
	}
	if errs := validation.IsDNS1123Subdomain(obj.GetName()); len(errs) > 0 {
		return nil, fmt.Errorf("%s name %q: %s", gvk.Kind, obj.GetName(), strings.Join(errs, "; "))
	}
	if svc, ok := obj.(*corev1.Service); ok {
		if errs := validation.IsDNS1035Label(svc.Name); len(errs) > 0 {
			return nil, fmt.Errorf("Service name %q: %s", svc.Name, strings.Join(errs, "; "))
		}
	}
	return obj, nil
}

// only returns the one object of type T, or an error naming how many there
// were.
func only[T object](objs []object) (T, error) {
	all := all[T](objs)
	if len(all) != 1 {
		var zero T
		return zero, fmt.Errorf("want one %T, rendered %d", zero, len(all))
	}
	return all[0], nil
}

// all returns the objects of type T.
func all[T object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
