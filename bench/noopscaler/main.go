// Command noopscaler is the floor of BenchmarkPollFloor: a KEDA external
// scaler that answers constants, with no interceptor and no state, so a
// poll of it costs what the transport costs. It serves /metrics (the Go
// runtime's counters, as pelwarden does) so that the benchmark can count
// what a poll allocates on the server, the same way for both.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

type noop struct {
	externalscaler.UnimplementedExternalScalerServer
}

func (noop) IsActive(context.Context, *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	return &externalscaler.IsActiveResponse{Result: true}, nil
}

func (noop) GetMetricSpec(context.Context, *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{MetricName: "noop", TargetSize: 5, TargetSizeFloat: 5}}}, nil
}

func (noop) GetMetrics(_ context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName: req.GetMetricName(), MetricValue: 10, MetricValueFloat: 10,
	}}}, nil
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address")
	httpAddr := flag.String("http", "127.0.0.1:0", "/metrics listen address")
	flag.Parse()
	if err := run(*grpcAddr, *httpAddr); err != nil {
		fmt.Fprintln(os.Stderr, "noopscaler:", err)
		os.Exit(1)
	}
}

func run(grpcAddr, httpAddr string) error {
	lis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(s, noop{})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	hs := &http.Server{Addr: httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.ListenAndServe() }()
	return s.Serve(lis)
}
