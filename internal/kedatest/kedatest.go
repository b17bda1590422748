// Package kedatest calls an external scaler the way KEDA's operator does,
// for tests and benchmarks: one connection per scalerAddress and TLS
// settings, shared by every ScaledObject of every namespace (KEDA's
// connection pool), and a poll of one trigger as KEDA's scale loop makes
// it. It uses KEDA's own generated client.
package kedatest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// serviceConfig is the service config KEDA's pool dials with.
const serviceConfig = `{"loadBalancingConfig": [{"round_robin":{}}]}`

// Dial opens the connection KEDA's pool opens for a scalerAddress, with
// the transport credentials of its TLS settings.
func Dial(addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithDefaultServiceConfig(serviceConfig), grpc.WithTransportCredentials(creds))
}

// Poll is one iteration of KEDA's scale loop for one external trigger:
// GetMetricSpec, then GetMetrics of the first spec's metric, then
// IsActive. KEDA stops at the first error, and logs one from
// GetMetricSpec without asking further: Poll returns it.
func Poll(ctx context.Context, c externalscaler.ExternalScalerClient, ref *externalscaler.ScaledObjectRef) (value int64, active bool, err error) {
	spec, err := c.GetMetricSpec(ctx, ref)
	if err != nil {
		return 0, false, err
	}
	if len(spec.GetMetricSpecs()) == 0 {
		return 0, false, fmt.Errorf("no metric spec")
	}
	m, err := c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: spec.GetMetricSpecs()[0].GetMetricName()})
	if err != nil {
		return 0, false, err
	}
	if len(m.GetMetricValues()) > 0 {
		value = m.GetMetricValues()[0].GetMetricValue()
	}
	a, err := c.IsActive(ctx, ref)
	if err != nil {
		return 0, false, err
	}
	return value, a.GetResult(), nil
}

// Tenant is one tenant's broken ScaledObjects, polled as KEDA's scale
// loop polls each: every interval, spread over it, on the connection the
// client was made on.
type Tenant struct {
	refused atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// StartTenant polls, in namespace, broken ScaledObjects whose
// pendingEntriesCount is not a number and big ones with 900 KB of
// metadata, each every interval, on stream jobs and group workers.
func StartTenant(c externalscaler.ExternalScalerClient, namespace string, broken, big int, interval time.Duration) *Tenant {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tenant{cancel: cancel}
	junk := strings.Repeat("x", 900<<10)
	for i := range broken + big {
		md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "notanumber"}
		name := fmt.Sprintf("broken-%d", i)
		if i >= broken {
			md = map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5", "notes": junk}
			name = fmt.Sprintf("big-%d", i)
		}
		ref := &externalscaler.ScaledObjectRef{Namespace: namespace, Name: name, ScalerMetadata: md}
		t.wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rand.N(interval)): //nolint:gosec // spreads the polls over the interval; nothing depends on it
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				if _, _, err := Poll(ctx, c, ref); err != nil && ctx.Err() == nil {
					t.refused.Add(1)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return t
}

// Refused is the polls refused so far.
func (t *Tenant) Refused() int64 { return t.refused.Load() }

// Stop ends every poll and waits for them.
func (t *Tenant) Stop() {
	t.cancel()
	t.wg.Wait()
}
