package redistest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NextServerEnv names a redis-server with the stream commands of Redis 8
// (XACKDEL, XREADGROUP ... CLAIM, XNACK). make test-redis-next sets it,
// and there every test that needs one of those commands runs on it and
// fails, never skips, where it lacks one.
const NextServerEnv = "PELWARDEN_REDIS_NEXT_SERVER"

// Commands some servers lack, as StartWith and Knows name them.
const (
	// XAckDel acknowledges and deletes in one command (Redis 8.2).
	XAckDel = "XACKDEL"
	// ReadClaim is XREADGROUP's CLAIM option (Redis 8.4).
	ReadClaim = "XREADGROUP CLAIM"
	// XNack releases pending entries to the group (Redis 8.8).
	XNack = "XNACK"
)

// StartWith starts a server that knows every one of commands. With
// NextServerEnv set it is that binary, and a command it lacks fails the
// test. Without, it is the server Start runs (ServerEnv, or PATH's), and
// the test is skipped where that server lacks one, by the server's own
// command table, never by its version: the compatibility matrix runs the
// test on each server (make compat), and make test-redis-next on the one
// that has them.
func StartWith(tb testing.TB, o Options, commands ...string) *Server {
	tb.Helper()
	next := os.Getenv(NextServerEnv)
	if next == "" {
		s := Start(tb, o)
		if missing := s.lacking(tb, commands); len(missing) > 0 {
			tb.Skipf("this test needs %s, which %s does not know (make test-redis-next runs it on a server that does)",
				strings.Join(missing, ", "), s.Version(tb))
		}
		return s
	}
	bin, err := exec.LookPath(next)
	if err != nil {
		tb.Fatalf("redistest: %s=%q is not an executable redis-server: %v", NextServerEnv, next, err)
	}
	s := startBinary(tb, bin, o)
	if missing := s.lacking(tb, commands); len(missing) > 0 {
		tb.Fatalf("redistest: %s=%s does not know %s", NextServerEnv, next, strings.Join(missing, ", "))
	}
	return s
}

// lacking lists the commands of want that the server does not know.
func (s *Server) lacking(tb testing.TB, want []string) []string {
	tb.Helper()
	var missing []string
	for _, c := range want {
		if !s.Knows(tb, c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// Knows reports whether the server knows command: a command name, or
// "COMMAND OPTION" for an option of it (as ReadClaim), from COMMAND DOCS.
func (s *Server) Knows(tb testing.TB, command string) bool {
	tb.Helper()
	name, option, _ := strings.Cut(command, " ")
	docs, err := s.Client(tb).Do(context.Background(), "COMMAND", "DOCS", name).Result()
	if err != nil {
		tb.Fatalf("redistest: COMMAND DOCS %s: %v", name, err)
	}
	doc := docOf(docs)
	if doc == nil {
		return false
	}
	return option == "" || slices.Contains(tokens(doc["arguments"]), option)
}

// docOf is the one command's entry of a COMMAND DOCS reply, in RESP2 (a
// flat list) or RESP3 (a map); nil when the server does not know it.
func docOf(reply any) map[string]any {
	var entry any
	switch r := reply.(type) {
	case map[any]any:
		for _, v := range r {
			entry = v
		}
	case []any:
		if len(r) == 2 {
			entry = r[1]
		}
	}
	return asMap(entry)
}

func asMap(v any) map[string]any {
	out := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			if ks, ok := k.(string); ok {
				out[ks] = v
			}
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if ks, ok := m[i].(string); ok {
				out[ks] = m[i+1]
			}
		}
	default:
		return nil
	}
	return out
}

// tokens lists the tokens of an argument list of COMMAND DOCS, nested
// blocks included.
func tokens(args any) []string {
	list, _ := args.([]any)
	var out []string
	for _, a := range list {
		m := asMap(a)
		if t, ok := m["token"].(string); ok {
			out = append(out, strings.ToUpper(t))
		}
		out = append(out, tokens(m["arguments"])...)
	}
	return out
}

// Nack releases ids to group with XNACK in mode (SILENT, FAIL or FATAL), as
// a worker gives entries back on a graceful shutdown: they stay pending
// with no owner until a reader claims them. It fails unless every id was
// pending.
func Nack(tb testing.TB, rdb Doer, stream, group, mode string, ids ...string) {
	tb.Helper()
	args := []any{"XNACK", stream, group, mode, "IDS", len(ids)}
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := rdb.Do(context.Background(), args...).Int64()
	if err != nil || n != int64(len(ids)) {
		tb.Fatalf("XNACK %s %s %s of %d entries: released %d, %v", stream, group, mode, len(ids), n, err)
	}
}

// ReadClaiming has consumer read with XREADGROUP ... CLAIM minIdle, as a
// worker of Redis 8.4 does: released entries and entries idle at least
// minIdle, whoever holds them, then new ones, up to count. It returns the
// ids read.
func ReadClaiming(tb testing.TB, rdb Doer, stream, group, consumer string, minIdle time.Duration, count int) []string {
	tb.Helper()
	reply, err := rdb.Do(context.Background(), "XREADGROUP", "GROUP", group, consumer, "COUNT", count,
		"CLAIM", minIdle.Milliseconds(), "STREAMS", stream, ">").Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		tb.Fatalf("%s reads %s with CLAIM %s: %v", consumer, stream, minIdle, err)
	}
	return claimedIDs(reply)
}

// claimedIDs reads the ids of an XREADGROUP reply of one stream, in RESP2
// (a list of [stream, entries]) or RESP3 (a map of stream to entries).
func claimedIDs(reply any) []string {
	var entries []any
	switch r := reply.(type) {
	case []any:
		if len(r) == 1 {
			if st, ok := r[0].([]any); ok && len(st) == 2 {
				entries, _ = st[1].([]any)
			}
		}
	case map[any]any:
		for _, v := range r {
			entries, _ = v.([]any)
		}
	}
	var ids []string
	{
		for _, e := range entries {
			if row, ok := e.([]any); ok && len(row) > 0 {
				if id, ok := row[0].(string); ok {
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// Doer runs any command: a client of one server or of a cluster.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// GrantKnown adds to user's ACL rule each of commands that the server
// knows (ACL SETUSER refuses a name it does not): what docs/security.md
// asks of a server with Redis 8's stream commands.
func (s *Server) GrantKnown(tb testing.TB, user string, commands ...string) {
	tb.Helper()
	for _, c := range commands {
		if strings.Contains(c, " ") || !s.Knows(tb, c) {
			continue
		}
		if err := s.Client(tb).Do(context.Background(), "ACL", "SETUSER", user, "+"+strings.ToLower(c)).Err(); err != nil {
			tb.Fatalf("redistest: ACL SETUSER %s +%s: %v", user, strings.ToLower(c), err)
		}
	}
}
