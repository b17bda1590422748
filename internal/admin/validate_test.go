package admin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/metadata"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

var conns = []string{"default", "orders"}

func jobs() *pelwardenv1.TargetRef { return &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"} }

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.True(t, strings.HasPrefix(status.Convert(err).Message(), field+": "), "the message names %s first: %q", field, status.Convert(err).Message())
}

func TestBadRequestsNameTheFieldAndWhatItAccepts(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", metadata.MaxNameLen+1)
	tests := map[string]struct {
		check func() error
		field string
		says  string
	}{
		"no target": {func() error { _, err := checkTarget(nil, conns); return err }, "target", `{"stream": "jobs", "group": "workers"}`},
		"unknown connection": {func() error {
			_, err := checkTarget(&pelwardenv1.TargetRef{Redis: "cache", Stream: "s", Group: "g"}, conns)
			return err
		}, "target.redis", `configured Redis connection (default, orders), got "cache"`},
		"no stream": {func() error { _, err := checkTarget(&pelwardenv1.TargetRef{Group: "g"}, conns); return err }, "target.stream", "is required"},
		"no group":  {func() error { _, err := checkTarget(&pelwardenv1.TargetRef{Stream: "s"}, conns); return err }, "target.group", "is required"},
		"long group": {func() error {
			_, err := checkTarget(&pelwardenv1.TargetRef{Stream: "s", Group: long}, conns)
			return err
		}, "target.group", "at most 1024 bytes"},
		"negative page size": {func() error {
			_, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), PageSize: -1}, conns)
			return err
		}, "page_size", "from 1 to 10000 (0 means 100)"},
		"huge page size": {func() error {
			_, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), PageSize: 10001}, conns)
			return err
		}, "page_size", "got 10001"},
		"forged page token": {func() error {
			_, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), PageToken: "not a token"}, conns)
			return err
		}, "page_token", "next_page_token of a previous page"},
		"negative idle": {func() error {
			_, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), MinIdleMs: -5}, conns)
			return err
		}, "min_idle_ms", "got -5"},
		"bad mode": {func() error {
			_, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Mode: "steal", Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: "c"}}, conns)
			return err
		}, "mode", `requeue (the default) or claim, got "steal"`},
		"no selector": {func() error { _, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs()}, conns); return err }, "consumer", "set consumer"},
		"empty consumer": {func() error {
			_, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Selector: &pelwardenv1.ReclaimRequest_Consumer{}}, conns)
			return err
		}, "consumer", "is required"},
		"no ids": {func() error {
			_, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{}}}, conns)
			return err
		}, "ids.ids", "1 to 10000 entry ids"},
		"malformed id": {func() error {
			_, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: []string{"1-0", "1700000000000"}}}}, conns)
			return err
		}, "ids.ids[1]", `<milliseconds>-<sequence> such as 1700000000000-0, got "1700000000000"`},
		"wildcard id": {func() error {
			_, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: []string{"1-*"}}}}, conns)
			return err
		}, "ids.ids[0]", "got"},
		"deregister without consumer": {func() error { _, err := checkConsumerRequest(jobs(), "", conns); return err }, "consumer", "is required"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.check()
			requireInvalid(t, err, tc.field)
			require.Contains(t, status.Convert(err).Message(), tc.says)
		})
	}
}

func TestGoodRequestsPassWithTheirDefaults(t *testing.T) {
	t.Parallel()
	q, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), PageToken: pageToken("1700000000000-3")}, conns)
	require.NoError(t, err)
	require.Equal(t, "default", q.group.Conn, "an empty redis is the default connection")
	require.Equal(t, int64(defaultPageSize), q.size)
	require.Equal(t, "1700000000000-3", q.after, "a page token round-trips")

	r, err := checkReclaim(&pelwardenv1.ReclaimRequest{Target: jobs(), Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: []string{"1-0"}, Consumer: "ghost"}}}, conns)
	require.NoError(t, err)
	require.Equal(t, "requeue", string(r.mode))
	require.Equal(t, "ghost", r.idsOwner)
}

// FuzzRequestValidation feeds arbitrary field values to every request
// check: each either passes or is InvalidArgument naming a field, and
// none panics. go test runs the seeds; make fuzz runs it longer.
func FuzzRequestValidation(f *testing.F) {
	f.Add("", "jobs", "workers", "worker-1", "1700000000000-0", "requeue", "", int32(0), int64(0))
	f.Add("orders", "s", "g", "", "1-1", "claim", pageToken("5-5"), int32(10000), int64(1000))
	f.Add("nope", "", "", "c", "0-0", "x", "%%%", int32(-1), int64(-1))
	f.Add("default", "a\x00b", "g\n", "c", "99999999999999999999-1", "", "MS0x", int32(10001), int64(1<<62))
	f.Add("default", "s", "g", "c", "1-", "REQUEUE", "LQ", int32(1), int64(31622400001))
	fields := []string{"target", "target.redis", "target.stream", "target.group", "consumer", "ids.ids", "ids.ids[0]", "ids.consumer",
		"mode", "page_size", "page_token", "min_idle_ms"}
	f.Fuzz(func(t *testing.T, redis, stream, group, consumer, id, mode, token string, size int32, idle int64) {
		ref := &pelwardenv1.TargetRef{Redis: redis, Stream: stream, Group: group}
		check := func(err error) {
			if err == nil {
				return
			}
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			msg := status.Convert(err).Message()
			field, _, ok := strings.Cut(msg, ": ")
			require.True(t, ok, "message %q starts with a field", msg)
			require.Contains(t, fields, field)
		}
		_, err := checkTarget(ref, conns)
		check(err)
		_, err = checkListPending(&pelwardenv1.ListPendingRequest{Target: ref, Consumer: consumer, MinIdleMs: idle, PageSize: size, PageToken: token}, conns)
		check(err)
		_, err = checkReclaim(&pelwardenv1.ReclaimRequest{Target: ref, Mode: mode, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: consumer}}, conns)
		check(err)
		_, err = checkReclaim(&pelwardenv1.ReclaimRequest{Target: ref, Mode: mode, Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: []string{id}, Consumer: consumer}}}, conns)
		check(err)
		_, err = checkConsumerRequest(ref, consumer, conns)
		check(err)
		if q, err := checkListPending(&pelwardenv1.ListPendingRequest{Target: jobs(), PageToken: token}, conns); err == nil && token != "" {
			require.Equal(t, token, pageToken(q.after), "an accepted token is one pelwarden could have made")
		}
	})
}
