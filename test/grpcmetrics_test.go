package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestGRPCSeriesOfEveryMethodExistBeforeItsFirstCall: the gRPC series are
// created at zero once every service is registered, so a rate or an alert
// sees a method, and every code of it, before it is first called.
func TestGRPCSeriesOfEveryMethodExistBeforeItsFirstCall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startPelwarden(t, srv.Addr(), nil)
	handled := series(scrape(t, p.app.HTTPAddr()), "pelwarden_grpc_server_handled_total")
	for _, s := range []string{
		`{grpc_code="OK",grpc_method="GetMetrics",grpc_service="externalscaler.ExternalScaler",grpc_type="unary"}`,
		`{grpc_code="Unavailable",grpc_method="GetMetrics",grpc_service="externalscaler.ExternalScaler",grpc_type="unary"}`,
		`{grpc_code="Canceled",grpc_method="StreamIsActive",grpc_service="externalscaler.ExternalScaler",grpc_type="server_stream"}`,
		`{grpc_code="PermissionDenied",grpc_method="Reclaim",grpc_service="pelwarden.v1.Admin",grpc_type="unary"}`,
	} {
		require.Equal(t, "0", handled[s], "%s", s)
	}
}
