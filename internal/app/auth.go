package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// mutatingMethods are the Admin RPCs that change a group. Every other
// method (the scaler, health, reflection, the read RPCs) passes unchecked.
var mutatingMethods = map[string]bool{
	pelwardenv1.Admin_Reclaim_FullMethodName:        true,
	pelwardenv1.Admin_DeleteConsumer_FullMethodName: true,
	pelwardenv1.Admin_Deregister_FullMethodName:     true,
}

const credentialHint = "send `authorization: Bearer <token>` with the token of admin.tokenFile, " +
	"or a client certificate whose identity is listed in admin.allowedClientIdentities"

// adminAuth decides who may call the mutating Admin RPCs: a caller with
// the bearer token of admin.tokenFile, or with a verified client
// certificate whose identity admin.allowedClientIdentities lists.
type adminAuth struct {
	cfg     config.Admin
	allowed map[string]bool
	log     *slog.Logger

	mu    sync.Mutex
	info  os.FileInfo // of the token file when last read
	token [sha256.Size]byte
}

func newAdminAuth(cfg config.Admin, log *slog.Logger) *adminAuth {
	a := &adminAuth{cfg: cfg, allowed: make(map[string]bool, len(cfg.AllowedClientIdentities)), log: log}
	for _, id := range cfg.AllowedClientIdentities {
		a.allowed[id] = true
	}
	return a
}

// guarded says whether a call needs credentials: the mutating RPCs, and a
// Findings call that asks for a MONITOR sample, which slows the whole
// Redis server while it runs.
func guarded(method string, req any) bool {
	if f, ok := req.(*pelwardenv1.FindingsRequest); ok {
		return f.GetSampleMs() > 0
	}
	return mutatingMethods[method]
}

// unary is the auth step of the interceptor chain.
func (a *adminAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !guarded(info.FullMethod, req) {
		return handler(ctx, req)
	}
	who, err := a.authorize(ctx)
	if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, "admin call authorized", "method", info.FullMethod, "by", who)
	return handler(ctx, req)
}

// authorize returns who the caller is, or the status that refuses it:
// Unauthenticated when it presented nothing usable, PermissionDenied when
// what it presented is not allowed or nothing is configured to allow.
func (a *adminAuth) authorize(ctx context.Context) (string, error) {
	if !a.cfg.Enabled() {
		return "", status.Error(codes.PermissionDenied, "Reclaim, DeleteConsumer and Deregister are off: "+
			"set admin.tokenFile (--admin-token-file) to accept a bearer token, "+
			"or admin.allowedClientIdentities to accept mTLS client certificates")
	}
	token, hasToken, malformed := bearerToken(ctx)
	ids := verifiedIdentities(ctx)
	for _, id := range ids {
		if a.allowed[id] {
			return "client certificate " + id, nil
		}
	}
	switch {
	case malformed && len(ids) == 0:
		return "", status.Error(codes.Unauthenticated, "the authorization header must be `Bearer <token>`")
	case !hasToken && len(ids) == 0:
		return "", status.Error(codes.Unauthenticated, "this call needs credentials: "+credentialHint)
	case !hasToken:
		return "", status.Errorf(codes.PermissionDenied, "client certificate identities %s are not in admin.allowedClientIdentities", strings.Join(ids, ", "))
	case a.cfg.TokenFile == "":
		return "", status.Error(codes.PermissionDenied, "bearer tokens are not accepted: admin.tokenFile is not set")
	}
	want, err := a.currentToken()
	if err != nil {
		a.log.ErrorContext(ctx, "admin token file unreadable; refusing mutating calls", "err", err)
		return "", status.Error(codes.Unavailable, "admin.tokenFile cannot be read; see pelwarden's log")
	}
	got := sha256.Sum256([]byte(token))
	// Comparing digests keeps the time spent independent of the token's
	// content and length.
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "", status.Error(codes.PermissionDenied, "the bearer token does not match admin.tokenFile")
	}
	return "bearer token", nil
}

// currentToken returns the digest of the token file, reading it again
// whenever it changed (a rotated Kubernetes Secret swaps the file).
func (a *adminAuth) currentToken() ([sha256.Size]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	info, err := os.Stat(a.cfg.TokenFile)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	if a.info != nil && os.SameFile(a.info, info) && a.info.ModTime().Equal(info.ModTime()) && a.info.Size() == info.Size() {
		return a.token, nil
	}
	token, err := config.ReadToken(a.cfg.TokenFile)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("admin.tokenFile: %w", err)
	}
	if a.info != nil {
		a.log.Info("admin token file changed; using the new token", "file", a.cfg.TokenFile)
	}
	a.info, a.token = info, sha256.Sum256([]byte(token))
	return a.token, nil
}

// bearerToken reads the authorization header: the token, whether there was
// one, and whether the header was there but not of the Bearer scheme.
func bearerToken(ctx context.Context) (token string, ok, malformed bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) == 0 {
		return "", false, false
	}
	scheme, token, found := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false, true
	}
	return token, true, false
}

// verifiedIdentities lists the identities of the caller's client
// certificate (subject common name, DNS and URI SANs), only when the TLS
// handshake verified it against the configured client CAs.
func verifiedIdentities(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := info.State.VerifiedChains[0][0]
	var ids []string
	if leaf.Subject.CommonName != "" {
		ids = append(ids, leaf.Subject.CommonName)
	}
	ids = append(ids, leaf.DNSNames...)
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	return ids
}
