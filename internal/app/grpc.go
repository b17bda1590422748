package app

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/tlsreload"
)

// scalerService is the health-check name of the ExternalScaler service; it
// is SERVING while every Redis connection answers. The empty name (overall
// liveness) stays SERVING while the process runs, so a Redis outage does not
// get pelwarden restarted.
const scalerService = "externalscaler.ExternalScaler"

// grpcCredentials returns the server option that turns TLS on, and starts
// following the certificate files, when grpc.tls is set. With TLS the one
// gRPC listener speaks TLS only: a plaintext client fails its handshake.
func (a *App) grpcCredentials(reg prometheus.Registerer) ([]grpc.ServerOption, error) {
	t := a.cfg.GRPC.TLS
	if !t.Enabled() {
		return nil, nil
	}
	r, err := tlsreload.New(
		tlsreload.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile},
		tlsreload.Options{Interval: t.ReloadInterval, MinVersion: t.TLSVersion(), Log: a.log, Metrics: tlsreload.NewMetrics(reg)},
	)
	if err != nil {
		return nil, fmt.Errorf("grpc.tls: %w", err)
	}
	a.tls = r
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}, nil
}

// grpcTLSMode names the gRPC transport security for the start-up log line.
func grpcTLSMode(t config.GRPCTLS) string {
	switch {
	case t.Mutual():
		return "mutual"
	case t.Enabled():
		return "tls"
	default:
		return "off"
	}
}

// newGRPCServer builds the server with its interceptor chain: metrics, then
// logging (once per call, at the boundary), then the refused calls'
// accounting (fair, nil for none: fairness.go), then auth (the mutating
// Admin RPCs; everything else passes), then recovery innermost so a panic
// is logged and counted like any other Internal error. No streaming RPC
// mutates, so streams skip auth. extra carries the transport credentials
// when TLS is on. The metrics are returned to be initialized once every
// service is registered.
func newGRPCServer(log *slog.Logger, reg prometheus.Registerer, auth *adminAuth, fair *refusals, extra ...grpc.ServerOption) (*grpc.Server, *rpcMetrics) {
	ch := newChain(log, reg, auth, fair)
	opts := append([]grpc.ServerOption{
		grpc.UnaryInterceptor(ch.unary),
		grpc.ChainStreamInterceptor(ch.stream...),
		// KEDA keeps one connection open; let it ping, and find dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		// A goroutine per call starts on a small stack, and the chain and
		// handlers grow it: copying stacks was a sixth of a poll's CPU. The
		// workers keep theirs. A worker held by a long stream (KEDA's
		// StreamIsActive) is lost to the pool, and a call that finds none
		// free gets a goroutine of its own, as without workers.
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// Advertised, so that a client allows as many calls at once:
		// without it gRPC's client allows 100. KEDA's operator sends every
		// ScaledObject's calls over one connection, and refused calls may
		// wait (fairness.go): at most maxHolds of them, so a connection
		// always has room for the calls of the triggers pelwarden serves.
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		// Fixed flow-control windows. gRPC grows them by its bandwidth
		// estimate, to megabytes on loopback, so a caller's oversized
		// message was read whole, frame by frame into fresh buffers, before
		// its size was refused. A fixed window lets a call send at most
		// this much ahead of what pelwarden has read; every request
		// pelwarden takes is a few hundred bytes, and the connection's
		// window still carries many at once.
		grpc.InitialWindowSize(streamWindowBytes),
		grpc.InitialConnWindowSize(connWindowBytes),
	}, extra...)
	return grpc.NewServer(opts...), ch.metrics
}

// maxHeaderListBytes bounds the headers of one call. gRPC takes 16 MB
// by default; pelwarden reads one header, a bearer token, and KEDA sends
// a few hundred bytes.
const maxHeaderListBytes = 64 << 10

// maxStreamsPerConn bounds the calls open at once on one connection:
// four times the refused calls that may wait at once.
const maxStreamsPerConn = 4 * maxHolds

// streamWindowBytes and connWindowBytes are the flow-control windows of a
// call and of a connection; 64 KiB is gRPC's least, and its default before
// the bandwidth estimate grows it.
const (
	streamWindowBytes = 64 << 10
	connWindowBytes   = 1 << 20
)

// streamWorkers is the number of goroutines kept to serve calls: a few per
// CPU, so that some outlive the streams KEDA holds open.
func streamWorkers() uint32 {
	return uint32(4 * runtime.GOMAXPROCS(0))
}

// chain is the server's interceptors, outermost first: metrics, logging,
// auth, recovery. For unary calls, which KEDA's polls are, they are steps
// of one interceptor: grpc chains several with a closure per interceptor
// per call. logUnary's step builds nothing for a call it drops. Streams
// are few and long-lived, and keep go-grpc-middleware's logging, whose
// fields logUnary repeats; no streaming RPC mutates, so streams skip auth.
type chain struct {
	metrics *rpcMetrics
	log     unaryLog
	fair    *refusals
	auth    *adminAuth
	recover grpc.UnaryServerInterceptor
	stream  []grpc.StreamServerInterceptor
}

func newChain(log *slog.Logger, reg prometheus.Registerer, auth *adminAuth, fair *refusals) chain {
	srvMetrics := newRPCMetrics(reg)
	failed := newFailedCalls()
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		if lvl >= logging.LevelWarn {
			ok, suppressed := failed.allow(streamCall(fields))
			if !ok {
				return
			}
			if suppressed > 0 {
				fields = append(fields, "suppressed", suppressed)
			}
		}
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(codeToLevel),
	}
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in gRPC handler", "panic", p, "stack", clip.Own(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})}
	stream := []grpc.StreamServerInterceptor{
		srvMetrics.streamInterceptor,
		logging.StreamServerInterceptor(logger, logOpts...),
	}
	if fair != nil {
		stream = append(stream, fair.streamInterceptor)
	}
	return chain{
		metrics: srvMetrics,
		log:     unaryLog{log: log, failed: failed},
		fair:    fair,
		auth:    auth,
		recover: recovery.UnaryServerInterceptor(recoverOpts...),
		stream:  append(stream, recovery.StreamServerInterceptor(recoverOpts...)),
	}
}

// unary runs the steps around a unary call: a refused call is logged and
// counted, and a panic is turned into Internal before it is.
func (ch chain) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	mm := ch.metrics.startUnary(info.FullMethod)
	resp, err := ch.fairly(ctx, req, info, handler)
	ch.log.finished(ctx, info.FullMethod, start, err)
	mm.finishUnary(err, start)
	return resp, err
}

// fairly runs a unary call under the refused calls' accounting: a call of
// a new caller may wait before it runs, a refused call's answer while its
// caller owes. Neither wait keeps the request: a request that is not run
// is let go before the wait, and every request once it has run.
func (ch chain) fairly(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if ch.fair == nil {
		return ch.authorized(ctx, req, info, handler)
	}
	c := callerOf(ctx, req)
	ctx = withRefusalNote(ctx)
	var resp any
	var err error
	if wait := ch.fair.before(c); wait > 0 {
		read := c.bytes <= holdBytes
		if !read {
			req = nil //nolint:wastedassign // lets the request go while the call waits
		}
		if err = ch.fair.holdNew(ctx, c, wait); err == nil && !read {
			err = status.Errorf(codes.ResourceExhausted, "refused unread: a request of %d bytes from a new caller, "+
				"while the refused calls of its namespace are over grpc.refusedCallsPerSecond; at most %d bytes are kept while a call waits", c.bytes, holdBytes)
		}
	}
	if err == nil {
		resp, err = ch.authorized(ctx, req, info, handler)
	}
	req = nil //nolint:ineffassign,wastedassign // lets the request go while the answer waits
	if refused(ctx, resp, err) {
		if owed := ch.fair.after(c); owed > 0 {
			ch.fair.hold(ctx, c, owed)
		}
	}
	return resp, err
}

// authorized runs a unary call past the credential check.
func (ch chain) authorized(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := ch.auth.check(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return ch.recover(ctx, req, info, handler)
}

// streamCall names a finished stream's method and code from
// go-grpc-middleware's logging fields.
func streamCall(fields []any) (method, code string) {
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		switch k {
		case "grpc.service", "grpc.method":
			method += "/" + v
		case "grpc.code":
			code = v
		}
	}
	return method, code
}

// codeToLevel keeps KEDA's steady polling at debug and surfaces failures.
func codeToLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK, codes.Canceled:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return logging.LevelError
	default:
		return logging.LevelWarn
	}
}
