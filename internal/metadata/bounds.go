package metadata

import (
	"fmt"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// Bounds of what a caller sends with a trigger, checked before anything
// of it is stored, hashed, compiled or logged. KEDA forwards every key of
// a trigger's metadata (scalerAddress, TLS file paths and keys of other
// scalers included), so the bounds leave room far past pelwarden's own
// keys: a real trigger is a dozen keys and a few hundred bytes.
const (
	// MaxNamespaceBytes is a Kubernetes namespace's longest name: a DNS
	// label.
	MaxNamespaceBytes = 63
	// MaxObjectNameBytes is a ScaledObject's longest name: a DNS
	// subdomain.
	MaxObjectNameBytes = 253
	// MaxMetricNameBytes bounds the metric name of GetMetrics. KEDA asks
	// for the name GetMetricSpec gave (at most 200 bytes, metricName) with
	// its s<trigger index>- prefix.
	MaxMetricNameBytes = 256
	// MaxKeyBytes bounds one metadata key.
	MaxKeyBytes = 256
	// MaxValueBytes bounds one metadata value: the names pelwarden reads
	// are at most MaxNameLen, and a value of another scaler's key, even a
	// PEM certificate, fits.
	MaxValueBytes = 4096
	// MaxKeys bounds the number of metadata keys.
	MaxKeys = 64
	// MaxMetadataBytes bounds all of a trigger's keys and values together.
	MaxMetadataBytes = 16 << 10
	// maxKeyEcho bounds a key quoted in a bound's error.
	maxKeyEcho = 40
)

// BoundError says which field of a request is past its bound, and the
// bound. It never quotes the field's value.
type BoundError struct {
	// Field names the field: namespace, name, metricName, metadata, or
	// metadata["key"] with the key clipped.
	Field string
	// Limit is the bound, in Unit.
	Limit int
	Unit  string
	// Got is the field's size, in Unit.
	Got int
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("%s: must be at most %d %s, got %d", e.Field, e.Limit, e.Unit, e.Got)
}

// CheckTriggerBounds checks the namespace, name and metadata of a trigger
// against their bounds, in that order. Of several metadata keys past a
// bound the least one is named, so the answer does not depend on map
// order. It allocates nothing unless a bound is passed.
func CheckTriggerBounds(namespace, name string, md map[string]string) error {
	if len(namespace) > MaxNamespaceBytes {
		return &BoundError{Field: "namespace", Limit: MaxNamespaceBytes, Unit: "bytes (a Kubernetes namespace)", Got: len(namespace)}
	}
	if len(name) > MaxObjectNameBytes {
		return &BoundError{Field: "name", Limit: MaxObjectNameBytes, Unit: "bytes (a Kubernetes object name)", Got: len(name)}
	}
	if len(md) > MaxKeys {
		return &BoundError{Field: "metadata", Limit: MaxKeys, Unit: "keys", Got: len(md)}
	}
	total, bad := 0, ""
	var err *BoundError
	for k, v := range md {
		total += len(k) + len(v)
		var e *BoundError
		switch {
		case len(k) > MaxKeyBytes:
			e = &BoundError{Field: fmt.Sprintf("metadata key %q", clip.String(k, maxKeyEcho)), Limit: MaxKeyBytes, Unit: "bytes", Got: len(k)}
		case len(v) > MaxValueBytes:
			e = &BoundError{Field: fmt.Sprintf("metadata[%q]", clip.String(k, maxKeyEcho)), Limit: MaxValueBytes, Unit: "bytes", Got: len(v)}
		}
		if e != nil && (err == nil || k < bad) {
			err, bad = e, k
		}
	}
	if err != nil {
		return err
	}
	if total > MaxMetadataBytes {
		return &BoundError{Field: "metadata", Limit: MaxMetadataBytes, Unit: "bytes of keys and values together", Got: total}
	}
	return nil
}

// CheckMetricName checks the metric name of a GetMetrics request.
func CheckMetricName(name string) error {
	if len(name) > MaxMetricNameBytes {
		return &BoundError{Field: "metricName", Limit: MaxMetricNameBytes, Unit: "bytes", Got: len(name)}
	}
	return nil
}
