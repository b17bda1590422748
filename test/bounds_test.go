package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// The "one caller can take gigabytes" class of issue 21: fields of
// megabytes sent by whoever reaches the gRPC port, without a credential.

// attackBytes is the size of one attacking field: the attacks
// sent a few megabytes a call.
const attackBytes = 4 << 20

// calls is how many distinct attacking requests each kind sends: were
// each one kept, the heap would grow by calls x attackBytes.
const calls = 8

// retainedBound is the most the heap may grow by across one kind of
// attack: a quarter of what keeping its requests would take.
const retainedBound = calls * attackBytes / 4

// replyBound bounds a ListTargets or DescribeTarget answer after the
// attacks: a handful of targets and refusals, not megabytes.
const replyBound = 16 << 10

// metricOnly is the victim's trigger as the default install serves it: a
// metric judged by idle time (the default policy has no liveness profile
// for it to name), no hygiene.
func metricOnly() map[string]string { return withoutHygiene(legit(metadata.ProfileKey, "")) }

// onTheVictim starts a stranger against the victim's Redis with the
// default trigger policy and its secrets planted, and returns what the
// attacks must leave as it was.
func onTheVictim(t *testing.T, tune func(*config.Config)) (*stranger, *redis.Client, books, map[string]string) {
	t.Helper()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	cfg := testConfig(rdbAddr(rdb))
	cfg.Triggers = config.Default().Triggers
	if tune != nil {
		tune(&cfg)
	}
	s := startStranger(t, cfg)
	_, err := s.client.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{
		ScaledObjectRef: soObj("jobs", "workers", metricOnly()), MetricName: "s0-pelwarden-default-jobs-workers"})
	require.NoError(t, err, "a legitimate poll is served")
	return s, rdb, readBooks(t, rdb), otherKeys(t, rdb, "hb:")
}

// kedaCall sends ref through one of the ExternalScaler RPCs, a different
// one for each i, as KEDA would, and returns its error.
func kedaCall(ctx context.Context, c externalscaler.ExternalScalerClient, i int, ref *externalscaler.ScaledObjectRef) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var err error
	switch i % 5 {
	case 0:
		// As KEDA does: a refused trigger is answered a spec, and KEDA's
		// next call, GetMetrics of it, gets the refusal.
		var spec *externalscaler.GetMetricSpecResponse
		if spec, err = c.GetMetricSpec(ctx, ref); err == nil {
			_, err = c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "s0-" + spec.GetMetricSpecs()[0].GetMetricName()})
		}
	case 1:
		_, err = c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "s0-pelwarden-default-jobs-workers"})
	case 2:
		_, err = c.IsActive(ctx, ref)
	case 3:
		var st externalscaler.ExternalScaler_StreamIsActiveClient
		if st, err = c.StreamIsActive(ctx, ref); err == nil {
			_, err = st.Recv()
		}
	default:
		// A refused trigger's stream sends a spec too; KEDA's poll of it
		// gets the refusal.
		var st externalscaler.ExternalScaler_StreamMetricSpecClient
		var spec *externalscaler.GetMetricSpecResponse
		if st, err = c.StreamMetricSpec(ctx, ref); err == nil {
			if spec, err = st.Recv(); err == nil {
				_, err = c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "s0-" + spec.GetMetricSpecs()[0].GetMetricName()})
			}
		}
	}
	return err
}

// filler is a string of n bytes that differs for each i.
func filler(i, n int) string {
	return fmt.Sprintf("%08d", i) + strings.Repeat("z", n-8)
}

// withKey is md with one more key.
func withKey(md map[string]string, k, v string) map[string]string {
	md[k] = v
	return md
}

// bytesAttack is one attack of the bytes class: a call sending its i-th
// distinct request, and the field and limit its refusal must name.
type bytesAttack struct {
	name         string
	call         func(i int) error
	field, limit string
}

// bytesAttacks are the attacks of the bytes class, each a field of
// megabytes or a pattern that compiles to a huge program.
func bytesAttacks(ctx context.Context, s *stranger) []bytesAttack {
	kedaAttack := func(ref func(i int) *externalscaler.ScaledObjectRef) func(int) error {
		return func(i int) error { return kedaCall(ctx, s.client, i, ref(i)) }
	}
	return []bytesAttack{
		{"metricName", func(i int) error {
			_, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{
				ScaledObjectRef: soObj("jobs", "workers", metricOnly()), MetricName: filler(i, attackBytes)})
			return err
		}, "metricName", "256 bytes"},
		{"a metadata value", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj("jobs", "workers", withKey(metricOnly(), "annotation", filler(i, attackBytes)))
		}), `metadata["annotation"]`, "4096 bytes"},
		{"many keys", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			md := metricOnly()
			for k := range attackBytes / 64 {
				md[filler(i*attackBytes+k, 32)] = "v"
			}
			return soObj("jobs", "workers", md)
		}), "metadata", "64 keys"},
		{"a namespace", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj(filler(i, attackBytes), "workers", metricOnly())
		}), "namespace", "63 bytes"},
		{"a name", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj("jobs", filler(i, attackBytes), metricOnly())
		}), "name", "253 bytes"},
		{"a multi-megabyte regex", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj("jobs", "workers", withKey(metricOnly(), "ownerMatch", "regex:(?P<owner>x)"+filler(i, attackBytes)))
		}), `metadata["ownerMatch"]`, "4096 bytes"},
		{"a regex past its length", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj("jobs", "workers", withKey(metricOnly(), "ownerMatch", "regex:(?P<owner>x)"+filler(i, 4000)))
		}), "ownerMatch", "at most 512"},
		// Under 512 bytes, accepted by Go's parser, and 70,000 instructions
		// compiled: the one that costs CPU and memory per call.
		{"a short regex with a huge program", kedaAttack(func(i int) *externalscaler.ScaledObjectRef {
			return soObj("jobs", "workers", withKey(metricOnly(), "ownerMatch", fmt.Sprintf("regex:(?P<owner>x%d)", i)+strings.Repeat("x{1000}", 70)))
		}), "ownerMatch", "more than 500 instructions"},
		{"CheckTrigger with a multi-megabyte regex", func(i int) error {
			_, err := s.admin.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: "jobs",
				Metadata: withKey(metricOnly(), "ownerMatch", "regex:(?P<owner>x)"+filler(i, attackBytes))})
			return err
		}, `metadata["ownerMatch"]`, "4096 bytes"},
	}
}

// TestMultiMegabyteFieldsAreRefusedNamingTheFieldAndTheLimit sends each
// attack of the bytes class, with the receive size raised to the
// most an operator may set so that every field reaches its own bound:
// each answer is InvalidArgument naming the field and the limit, short;
// the heap does not keep the requests; the Admin API's answers stay
// small; no log line carries a long string; Redis is unchanged and no
// secret leaks.
func TestMultiMegabyteFieldsAreRefusedNamingTheFieldAndTheLimit(t *testing.T) {
	// The refused calls' shares would hold each refused megabyte for
	// seconds (TestABrokenTriggerNeverHoldsItsConnection and the shared
	// connection test check them); off here, so the attack sends its
	// calls as fast as it can.
	s, rdb, before, keysBefore := onTheVictim(t, func(c *config.Config) {
		c.GRPC.MaxRecvMsgBytes = 64 << 20
		c.GRPC.RefusedCallsPerSecond = 0
	})
	attacks := bytesAttacks(context.Background(), s)
	for _, a := range attacks {
		base := heapAfterGC()
		for i := range calls {
			err := a.call(i)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", a.name, err)
			msg := status.Convert(err).Message()
			require.Contains(t, msg, a.field, a.name)
			require.Contains(t, msg, a.limit, a.name)
			require.Less(t, len(msg), 512, "%s: the answer does not echo the field", a.name)
		}
		grew := int64(heapAfterGC()) - int64(base)
		t.Logf("%s: heap grew by %d bytes over %d calls of %d bytes", a.name, grew, calls, attackBytes)
		require.Less(t, grew, int64(retainedBound), "%s: the requests are not kept", a.name)
	}
	requireSmallAnswers(t, s)
	requireLogBounded(t, s)
	require.Equal(t, before, readBooks(t, rdb), "streams, fields, pending entries and consumers are unchanged")
	require.Equal(t, keysBefore, otherKeys(t, rdb, "hb:"), "no other key changed (the live worker beats on)")
	s.requireNoSecret(t)
}

// TestTheReceiveSizeRefusesAMessageBeforeItIsRead: with the default
// grpc.maxRecvMsgBytes a multi-megabyte request is ResourceExhausted
// naming the limit; the largest legitimate requests, a KEDA trigger at
// every metadata bound and a Reclaim of 10,000 named entries, fit.
func TestTheReceiveSizeRefusesAMessageBeforeItIsRead(t *testing.T) {
	s, rdb, before, keysBefore := onTheVictim(t, nil)
	ctx := context.Background()
	_, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{
		ScaledObjectRef: soObj("jobs", "workers", metricOnly()), MetricName: filler(0, attackBytes)})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), fmt.Sprint(config.DefaultMaxRecvMsgBytes), "the answer names the limit")

	// A trigger at every bound of its metadata is served.
	md := metricOnly()
	total := 0
	for k, v := range md {
		total += len(k) + len(v)
	}
	for i := 0; total+2*64 < metadata.MaxMetadataBytes && len(md) < metadata.MaxKeys; i++ {
		k := fmt.Sprintf("x-%04d", i)
		v := strings.Repeat("v", min(metadata.MaxValueBytes, metadata.MaxMetadataBytes-total-len(k)))
		md[k], total = v, total+len(k)+len(v)
	}
	atBounds := soObj(strings.Repeat("n", metadata.MaxNamespaceBytes), strings.Repeat("o", metadata.MaxObjectNameBytes), md)
	_, err = s.client.GetMetricSpec(ctx, atBounds)
	require.NoError(t, err, "a trigger at its bounds (%d bytes of metadata) is served", total)

	// The largest Admin request is decoded: it reaches the credential
	// check, which refuses it, as no credential is configured.
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%020d-%020d", uint64(1)<<63+uint64(i), uint64(1)<<63)
	}
	long := strings.Repeat("w", metadata.MaxNameLen)
	_, err = s.admin.Reclaim(ctx, &pelwardenv1.ReclaimRequest{
		Target:   &pelwardenv1.TargetRef{Stream: long, Group: long},
		Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: ids, Consumer: long}},
	})
	require.NotEqual(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	require.Equal(t, before, readBooks(t, rdb))
	require.Equal(t, keysBefore, otherKeys(t, rdb, "hb:"))
	requireLogBounded(t, s)
	s.requireNoSecret(t)
}

// requireSmallAnswers checks that ListTargets and DescribeTarget of the
// victim's group answer in a few kilobytes.
func requireSmallAnswers(t *testing.T, s *stranger) {
	t.Helper()
	ctx := context.Background()
	list, err := s.admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err)
	require.Less(t, proto.Size(list), replyBound, "ListTargets")
	d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Less(t, proto.Size(d), replyBound, "DescribeTarget")
}

// maxLogLine bounds a whole log line: a line has a dozen attributes, each
// cut to clip.MaxLogValue.
const maxLogLine = 16 * clip.MaxLogValue

// requireLogBounded checks that no log line is longer than maxLogLine and
// that no string in a line, the message included, is longer than
// clip.MaxLogValue.
func requireLogBounded(t *testing.T, s *stranger) {
	t.Helper()
	lines := s.logs.lines()
	require.NotEmpty(t, lines)
	for i, line := range lines {
		require.LessOrEqual(t, len(line), maxLogLine, "log line %d", i)
		var fields map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &fields), "log line %d", i)
		requireStringsBounded(t, fields, fmt.Sprint("log line ", i))
	}
}

func requireStringsBounded(t *testing.T, v any, where string) {
	t.Helper()
	switch x := v.(type) {
	case string:
		require.LessOrEqual(t, len(x), clip.MaxLogValue, "%s: %.80s...", where, x)
	case map[string]any:
		for k, e := range x {
			requireStringsBounded(t, e, where+" "+k)
		}
	case []any:
		for _, e := range x {
			requireStringsBounded(t, e, where)
		}
	}
}

// TestLongNamesCostBoundedBytesOnMetricsAndInTheLog: eight triggers on
// groups whose stream and group names are a kilobyte each, asking for a
// hygiene the default policy refuses (so pelwarden logs their targets).
// /metrics grows by no more per target than with 16-byte names plus the
// cut label values (without the cut, by 2 KB more a series), every label
// value is at most
// liveness.MaxLabelValue, every log string at most clip.MaxLogValue, and
// Redis is unchanged.
func TestLongNamesCostBoundedBytesOnMetricsAndInTheLog(t *testing.T) {
	s, rdb, before, _ := onTheVictim(t, nil)
	ctx := context.Background()
	const targets = 8
	poll := func(stream, group string) {
		md := withKey(withKey(metricOnly(), "stream", stream), "consumerGroup", group)
		md["reclaim"], md["entryStaleSeconds"] = "requeue", "60"
		_, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "so-"+stream[:8], md), MetricName: "s0-m"})
		require.NoError(t, err)
	}
	groups := func(name func(i int) string) {
		for i := range targets {
			require.NoError(t, rdb.XGroupCreateMkStream(ctx, name(i), name(i), "$").Err())
			poll(name(i), name(i))
		}
	}
	size := func() int { return len(scrape(t, s.app.HTTPAddr())) }
	base := size()
	groups(func(i int) string { return filler(i, 16) })
	short := (size() - base) / targets
	base = size()
	groups(func(i int) string { return filler(100+i, metadata.MaxNameLen) })
	long := (size() - base) / targets
	t.Logf("/metrics bytes per target: %d with 16-byte names, %d with %d-byte names", short, long, metadata.MaxNameLen)

	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(scrape(t, s.app.HTTPAddr())))
	require.NoError(t, err)
	longSeries := 0
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				require.LessOrEqual(t, len(l.GetValue()), liveness.MaxLabelValue, "%s{%s}", name, l.GetName())
				if l.GetName() == "stream" && strings.HasPrefix(l.GetValue(), "000001") {
					longSeries++
				}
			}
		}
	}
	require.Positive(t, longSeries, "the long-named targets have their series")
	// Each of a target's series carries its stream and group: cut, each
	// costs at most MaxLabelValue more than a short name.
	perTarget := longSeries / targets
	require.LessOrEqual(t, long, short+perTarget*2*liveness.MaxLabelValue,
		"a kilobyte name costs at most two cut label values more a series (%d series a target)", perTarget)
	requireLogBounded(t, s)
	require.Equal(t, before, readBooks(t, rdb))
	s.requireNoSecret(t)
}

// TestMegabyteHeadersAreRefused: a call's headers are bounded as its
// message is; gRPC's own default would take 16 MB of them.
func TestMegabyteHeadersAreRefused(t *testing.T) {
	s, rdb, before, keysBefore := onTheVictim(t, nil)
	ctx := grpcmd.AppendToOutgoingContext(context.Background(), "x-filler", filler(0, 1<<20))
	_, err := s.client.GetMetricSpec(ctx, soObj("jobs", "workers", metricOnly()))
	require.Error(t, err, "a megabyte of headers is not read")
	_, err = s.client.GetMetricSpec(context.Background(), soObj("jobs", "workers", metricOnly()))
	require.NoError(t, err, "the next call is served")
	require.Equal(t, before, readBooks(t, rdb))
	require.Equal(t, keysBefore, otherKeys(t, rdb, "hb:"))
	requireLogBounded(t, s)
	s.requireNoSecret(t)
}
