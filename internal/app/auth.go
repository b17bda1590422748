package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
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
)

const credentialHint = "send `authorization: Bearer <token>` with the token of admin.tokenFile (or, for Deregister, " +
	"admin.workerTokenFile or one of admin.workerTokens), or a client certificate whose identity is listed in admin.allowedClientIdentities " +
	"(or, for Deregister, a URI SAN under admin.workerIdentityPrefix)"

// adminAuth decides who may call the guarded Admin RPCs (see required):
// the operator, with the bearer token of admin.tokenFile or a verified
// client certificate admin.allowedClientIdentities lists, may call them
// all; a worker, with the token of admin.workerTokenFile, one of
// admin.workerTokens (on the streams its globs match) or a client
// certificate whose URI SAN starts with admin.workerIdentityPrefix (for
// the consumer it names), only Deregister.
type adminAuth struct {
	cfg     config.Admin
	allowed map[string]bool
	log     *slog.Logger

	operator, worker bearerFile
	// scoped are admin.workerTokens, each with its streams.
	scoped []scopedToken
}

type scopedToken struct {
	file    *bearerFile
	streams []string
}

func newAdminAuth(cfg config.Admin, log *slog.Logger) *adminAuth {
	a := &adminAuth{cfg: cfg, allowed: make(map[string]bool, len(cfg.AllowedClientIdentities)), log: log,
		operator: bearerFile{key: "admin.tokenFile", path: cfg.TokenFile, log: log},
		worker:   bearerFile{key: "admin.workerTokenFile", path: cfg.WorkerTokenFile, log: log}}
	for _, id := range cfg.AllowedClientIdentities {
		a.allowed[id] = true
	}
	for i, w := range cfg.WorkerTokens {
		key := fmt.Sprintf("admin.workerTokens[%d]", i)
		a.scoped = append(a.scoped, scopedToken{file: &bearerFile{key: key + ".tokenFile", path: w.TokenFile, log: log}, streams: w.Streams})
	}
	return a
}

// unary is the auth step as an interceptor of its own.
func (a *adminAuth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// check is the auth step of the unary chain: nil lets the call through.
func (a *adminAuth) check(ctx context.Context, method string, req any) error {
	need := required(method, req)
	if need == nobody {
		return nil
	}
	c, err := a.authorize(ctx)
	if err != nil {
		return err
	}
	if err := c.allows(need, method, req); err != nil {
		a.log.WarnContext(ctx, "admin call refused", "method", method, "by", c.who, "err", err)
		return err
	}
	a.log.InfoContext(ctx, "admin call authorized", "method", method, "by", c.who)
	return nil
}

// authorize returns who the caller is, or the status that refuses it:
// Unauthenticated when it presented nothing usable, PermissionDenied when
// what it presented is not allowed or nothing is configured to allow. The
// operator's credential wins over a worker's when a caller shows both.
func (a *adminAuth) authorize(ctx context.Context) (caller, error) {
	if !a.cfg.Enabled() {
		return caller{}, status.Error(codes.PermissionDenied, "Reclaim, DeleteConsumer and Deregister are off: "+
			"set admin.tokenFile (--admin-token-file) to accept a bearer token, "+
			"or admin.allowedClientIdentities to accept mTLS client certificates")
	}
	token, hasToken, malformed := bearerToken(ctx)
	leaf := verifiedLeaf(ctx)
	ids := identities(leaf)
	for _, id := range ids {
		if a.allowed[id] {
			return caller{class: operatorClass, who: "client certificate " + id}, nil
		}
	}
	if hasToken {
		if c, ok, err := a.bearer(ctx, token); ok || err != nil {
			return c, err
		}
	}
	if c, ok := a.workerCertificate(leaf); ok {
		return c, nil
	}
	switch {
	case malformed && len(ids) == 0:
		return caller{}, status.Error(codes.Unauthenticated, "the authorization header must be `Bearer <token>`")
	case !hasToken && len(ids) == 0:
		return caller{}, status.Error(codes.Unauthenticated, "this call needs credentials: "+credentialHint)
	case !hasToken:
		return caller{}, status.Errorf(codes.PermissionDenied, "client certificate identities %s are not in admin.allowedClientIdentities "+
			"(nor under admin.workerIdentityPrefix)", strings.Join(ids, ", "))
	case !a.cfg.AcceptsBearerTokens():
		return caller{}, status.Error(codes.PermissionDenied, "bearer tokens are not accepted: none of admin.tokenFile, admin.workerTokenFile and admin.workerTokens is set")
	}
	return caller{}, status.Error(codes.PermissionDenied, "the bearer token does not match admin.tokenFile (nor admin.workerTokenFile, nor admin.workerTokens)")
}

// bearer is who a bearer token names: the operator, a worker of every
// stream, or a worker of the streams of one of admin.workerTokens.
func (a *adminAuth) bearer(ctx context.Context, token string) (caller, bool, error) {
	for _, f := range []*bearerFile{&a.operator, &a.worker} {
		ok, err := f.matches(ctx, token)
		switch {
		case err != nil:
			return caller{}, false, err
		case ok && f == &a.operator:
			return caller{class: operatorClass, who: "bearer token"}, true, nil
		case ok:
			return caller{class: workerClass, who: "worker bearer token"}, true, nil
		}
	}
	for _, s := range a.scoped {
		ok, err := s.file.matches(ctx, token)
		switch {
		case err != nil:
			return caller{}, false, err
		case ok:
			return caller{class: workerClass, streams: s.streams, who: "worker bearer token of " + strings.TrimSuffix(s.file.key, ".tokenFile")}, true, nil
		}
	}
	return caller{}, false, nil
}

// workerCertificate is the worker a verified certificate's URI SAN under
// admin.workerIdentityPrefix names. Only a URI SAN counts: a common name is
// free text a CA may copy from a request.
func (a *adminAuth) workerCertificate(leaf *x509.Certificate) (caller, bool) {
	if a.cfg.WorkerIdentityPrefix == "" || leaf == nil {
		return caller{}, false
	}
	for _, u := range leaf.URIs {
		id := u.String()
		if consumer, ok := strings.CutPrefix(id, a.cfg.WorkerIdentityPrefix); ok && consumer != "" {
			return caller{class: workerClass, consumer: consumer, who: "worker client certificate " + id}, true
		}
	}
	return caller{}, false
}

// bearerFile is one bearer token file, read again whenever it changes (a
// rotated Kubernetes Secret swaps the file).
type bearerFile struct {
	key, path string
	log       *slog.Logger

	mu    sync.Mutex
	info  os.FileInfo // of the file when last read
	token [sha256.Size]byte
}

// matches says whether token is the file's; an unset file matches nothing,
// and an unreadable one refuses the call.
func (f *bearerFile) matches(ctx context.Context, token string) (bool, error) {
	if f.path == "" {
		return false, nil
	}
	want, err := f.current()
	if err != nil {
		f.log.ErrorContext(ctx, "token file unreadable; refusing the calls it allows", "key", f.key, "err", err)
		return false, status.Errorf(codes.Unavailable, "%s cannot be read; see pelwarden's log", f.key)
	}
	got := sha256.Sum256([]byte(token))
	// Comparing digests keeps the time spent independent of the token's
	// content and length.
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1, nil
}

func (f *bearerFile) current() ([sha256.Size]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	if f.info != nil && os.SameFile(f.info, info) && f.info.ModTime().Equal(info.ModTime()) && f.info.Size() == info.Size() {
		return f.token, nil
	}
	token, err := config.ReadToken(f.path)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("%s: %w", f.key, err)
	}
	if f.info != nil {
		f.log.Info("token file changed; using the new token", "key", f.key, "file", f.path)
	}
	f.info, f.token = info, sha256.Sum256([]byte(token))
	return f.token, nil
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

// verifiedLeaf is the caller's client certificate, only when the TLS
// handshake verified it against the configured client CAs.
func verifiedLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// identities lists a verified certificate's identities: subject common
// name, DNS and URI SANs.
func identities(leaf *x509.Certificate) []string {
	if leaf == nil {
		return nil
	}
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
