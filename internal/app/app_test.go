package app

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

func TestNewClosesWhatItOpenedWhenALaterStepFails(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	grpcAddr := free.Addr().String()
	require.NoError(t, free.Close())

	cfg := config.Default()
	cfg.Redis = []config.Redis{config.DefaultRedis("default", redistest.Start(t).Addr())}
	cfg.GRPC.Addr, cfg.HTTP.Addr = grpcAddr, taken.Addr().String()
	_, err = New(cfg, discard)
	require.ErrorContains(t, err, "http.addr "+taken.Addr().String())

	again, err := net.Listen("tcp", grpcAddr)
	require.NoError(t, err, "New closes the gRPC listener it bound before the HTTP one failed")
	require.NoError(t, again.Close())
}
