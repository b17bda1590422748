package app

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rpcMetrics are the gRPC server metrics go-grpc-middleware's prometheus
// provider defines, under the same names, labels and help, so dashboards
// and alerts read them unchanged. They are kept here because a KEDA poll
// is two unary calls that each paid for the provider's per-call label
// lookups (five WithLabelValues and a reporter, about 1.4 µs and 128 B
// per call in BenchmarkUnaryChain); a unary call of a known method now
// only bumps counters resolved when the server started.
type rpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	seconds                          *prometheus.HistogramVec

	// unary holds the resolved children of every unary method, by full
	// method name. Written once by initialize, before the server serves.
	unary map[string]*methodMetrics
}

// methodMetrics are one method's series, resolved once.
type methodMetrics struct {
	started, received, sent prometheus.Counter
	seconds                 prometheus.Observer
	// handled is by code; nil where the series is created on first use.
	handled    [codes.Unauthenticated + 1]prometheus.Counter
	handledVec *prometheus.CounterVec
	labels     [3]string
}

// The values of the grpc_type label.
const (
	rpcUnary        = "unary"
	rpcClientStream = "client_stream"
	rpcServerStream = "server_stream"
	rpcBidiStream   = "bidi_stream"
)

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pelwarden", Name: name, Help: help}, labels)
	}
	m := &rpcMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels[:3:3], "grpc_code")),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pelwarden", Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets}, labels),
		unary: map[string]*methodMetrics{},
	}
	reg.MustRegister(m.started, m.handled, m.received, m.sent, m.seconds)
	return m
}

// initialize creates every method's series at zero, so rates and alerts
// see a method before its first call, and resolves the unary ones. It
// must run after the services are registered: before, it finds none, and
// every call pays the lookups.
func (m *rpcMetrics) initialize(s *grpc.Server) {
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			mm := m.resolve(methodType(mi.IsClientStream, mi.IsServerStream), service, mi.Name)
			for c := range mm.handled {
				mm.handled[c] = m.handled.WithLabelValues(mm.labels[0], mm.labels[1], mm.labels[2], codes.Code(c).String())
			}
			if !mi.IsClientStream && !mi.IsServerStream {
				m.unary["/"+service+"/"+mi.Name] = mm
			}
		}
	}
}

func (m *rpcMetrics) resolve(typ, service, method string) *methodMetrics {
	return &methodMetrics{
		started:    m.started.WithLabelValues(typ, service, method),
		received:   m.received.WithLabelValues(typ, service, method),
		sent:       m.sent.WithLabelValues(typ, service, method),
		seconds:    m.seconds.WithLabelValues(typ, service, method),
		handledVec: m.handled,
		labels:     [3]string{typ, service, method},
	}
}

func (m *rpcMetrics) lookup(typ, fullMethod string) *methodMetrics {
	if mm, ok := m.unary[fullMethod]; ok && typ == rpcUnary {
		return mm
	}
	service, method := splitMethod(fullMethod)
	return m.resolve(typ, service, method)
}

// done counts a finished call under its code, as the provider does: a
// plain context error is its status code, any other plain error Unknown.
func (mm *methodMetrics) done(err error, start time.Time) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	c := st.Code()
	if int(c) < len(mm.handled) && mm.handled[c] != nil {
		mm.handled[c].Inc()
	} else {
		mm.handledVec.WithLabelValues(mm.labels[0], mm.labels[1], mm.labels[2], c.String()).Inc()
	}
	mm.seconds.Observe(time.Since(start).Seconds())
}

func (m *rpcMetrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	mm := m.startUnary(info.FullMethod)
	resp, err := handler(ctx, req)
	mm.finishUnary(err, start)
	return resp, err
}

// startUnary counts a unary call started and its request received.
func (m *rpcMetrics) startUnary(fullMethod string) *methodMetrics {
	mm := m.lookup(rpcUnary, fullMethod)
	mm.started.Inc()
	mm.received.Inc()
	return mm
}

// finishUnary counts a unary call's response, if any, and its end.
func (mm *methodMetrics) finishUnary(err error, start time.Time) {
	if err == nil {
		mm.sent.Inc()
	}
	mm.done(err, start)
}

func (m *rpcMetrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	mm := m.lookup(methodType(info.IsClientStream, info.IsServerStream), info.FullMethod)
	mm.started.Inc()
	err := handler(srv, &countedStream{ServerStream: ss, m: mm})
	mm.done(err, start)
	return err
}

// countedStream counts the messages a stream moves.
type countedStream struct {
	grpc.ServerStream
	m *methodMetrics
}

func (s *countedStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	if err == nil {
		s.m.sent.Inc()
	}
	return err
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	if err == nil {
		s.m.received.Inc()
	}
	return err
}

func methodType(clientStream, serverStream bool) string {
	switch {
	case clientStream && serverStream:
		return rpcBidiStream
	case clientStream:
		return rpcClientStream
	case serverStream:
		return rpcServerStream
	default:
		return rpcUnary
	}
}

// splitMethod cuts "/package.Service/Method" into its service and method.
func splitMethod(fullMethod string) (service, method string) {
	service, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "unknown", "unknown"
	}
	return service, method
}
