package admin

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Bounds of request fields.
const (
	// maxEcho bounds a bad value quoted back in an error.
	maxEcho         = 80
	defaultPageSize = 100
	maxPageSize     = 10000
	maxIDs          = 10000
	// maxIdle is a year: no entry waits longer, and it keeps
	// milliseconds well inside what a Duration holds.
	maxIdle = 366 * 24 * time.Hour
)

// invalid is the InvalidArgument status for one field, saying what it
// accepts.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// checkTarget reads a TargetRef; an empty redis is the default connection.
func checkTarget(ref *pelwardenv1.TargetRef, conns []string) (liveness.GroupRef, error) {
	if ref == nil {
		return liveness.GroupRef{}, invalid("target", `is required, such as {"stream": "jobs", "group": "workers"}`)
	}
	g := liveness.GroupRef{Conn: ref.GetRedis(), Stream: ref.GetStream(), Group: ref.GetGroup()}
	if g.Conn == "" {
		g.Conn = metadata.DefaultConnection
	}
	if !slices.Contains(conns, g.Conn) {
		return g, invalid("target.redis", "must name a configured Redis connection (%s), got %q", strings.Join(conns, ", "), clip.String(g.Conn, maxEcho))
	}
	if err := checkName("target.stream", g.Stream); err != nil {
		return g, err
	}
	return g, checkName("target.group", g.Group)
}

func checkName(field, v string) error {
	switch {
	case v == "":
		return invalid(field, "is required")
	case len(v) > metadata.MaxNameLen:
		return invalid(field, "must be at most %d bytes, got %d", metadata.MaxNameLen, len(v))
	}
	return nil
}

func checkMinIdle(ms int64) (time.Duration, error) {
	if ms < 0 || ms > maxIdle.Milliseconds() {
		return 0, invalid("min_idle_ms", "must be milliseconds from 0 to %d (a year), got %d", maxIdle.Milliseconds(), ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func checkPageSize(n int32) (int64, error) {
	switch {
	case n == 0:
		return defaultPageSize, nil
	case n < 0 || n > maxPageSize:
		return 0, invalid("page_size", "must be from 1 to %d (0 means %d), got %d", maxPageSize, defaultPageSize, n)
	}
	return int64(n), nil
}

// A page token is the last id of the previous page, encoded so that
// clients treat it as opaque and the format may change.
func pageToken(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastID))
}

func checkPageToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || !redisx.ValidID(string(raw)) {
		return "", invalid("page_token", "must be the next_page_token of a previous page, or empty for the first page")
	}
	return string(raw), nil
}

func checkMode(mode string) (policy.ReclaimMode, error) {
	switch mode {
	case "", string(policy.ReclaimRequeue):
		return policy.ReclaimRequeue, nil
	case string(policy.ReclaimClaim):
		return policy.ReclaimClaim, nil
	}
	return "", invalid("mode", "must be requeue (the default) or claim, got %q", clip.String(mode, maxEcho))
}

func checkIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > maxIDs {
		return invalid("ids.ids", "must list 1 to %d entry ids, got %d", maxIDs, len(ids))
	}
	for i, id := range ids {
		if !redisx.ValidID(id) {
			return invalid(fmt.Sprintf("ids.ids[%d]", i), "must be a complete stream entry id <milliseconds>-<sequence> such as 1700000000000-0, got %q", clip.String(id, maxEcho))
		}
	}
	return nil
}

// listPending is a checked ListPendingRequest.
type listPending struct {
	group    liveness.GroupRef
	consumer string
	minIdle  time.Duration
	size     int64
	after    string
}

func checkListPending(req *pelwardenv1.ListPendingRequest, conns []string) (listPending, error) {
	var q listPending
	var err error
	if q.group, err = checkTarget(req.GetTarget(), conns); err != nil {
		return q, err
	}
	if q.consumer = req.GetConsumer(); len(q.consumer) > metadata.MaxNameLen {
		return q, invalid("consumer", "must be at most %d bytes, got %d", metadata.MaxNameLen, len(q.consumer))
	}
	if q.minIdle, err = checkMinIdle(req.GetMinIdleMs()); err != nil {
		return q, err
	}
	if q.size, err = checkPageSize(req.GetPageSize()); err != nil {
		return q, err
	}
	q.after, err = checkPageToken(req.GetPageToken())
	return q, err
}

// reclaimRequest is a checked ReclaimRequest: either consumer or ids is set.
type reclaimRequest struct {
	group    liveness.GroupRef
	consumer string
	ids      []string
	// idsOwner is the owner the ids must still have; empty for each
	// entry's current owner.
	idsOwner string
	mode     policy.ReclaimMode
}

func checkReclaim(req *pelwardenv1.ReclaimRequest, conns []string) (reclaimRequest, error) {
	var q reclaimRequest
	var err error
	if q.group, err = checkTarget(req.GetTarget(), conns); err != nil {
		return q, err
	}
	if q.mode, err = checkMode(req.GetMode()); err != nil {
		return q, err
	}
	switch sel := req.GetSelector().(type) {
	case *pelwardenv1.ReclaimRequest_Consumer:
		q.consumer = sel.Consumer
		return q, checkName("consumer", q.consumer)
	case *pelwardenv1.ReclaimRequest_Ids:
		q.ids, q.idsOwner = sel.Ids.GetIds(), sel.Ids.GetConsumer()
		if len(q.idsOwner) > metadata.MaxNameLen {
			return q, invalid("ids.consumer", "must be at most %d bytes, got %d", metadata.MaxNameLen, len(q.idsOwner))
		}
		return q, checkIDs(q.ids)
	default:
		return q, invalid("consumer", `set consumer (every entry of one consumer) or ids (named entries), such as {"consumer": "worker-1"} or {"ids": {"ids": ["1700000000000-0"]}}`)
	}
}

func checkConsumerRequest(ref *pelwardenv1.TargetRef, consumer string, conns []string) (liveness.GroupRef, error) {
	g, err := checkTarget(ref, conns)
	if err != nil {
		return g, err
	}
	return g, checkName("consumer", consumer)
}
