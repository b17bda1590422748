package app

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

const workerToken = "a-worker-token-for-deregister"

// TestEveryAdminMethodIsReadOnlyOrInTheCredentialTable: a new RPC must be
// placed, so that one that changes a group cannot slip in unguarded.
func TestEveryAdminMethodIsReadOnlyOrInTheCredentialTable(t *testing.T) {
	t.Parallel()
	readOnly := map[string]bool{"ListTargets": true, "DescribeTarget": true, "ListPending": true, "Plan": true, "Findings": true, "WatchEvents": true, "CheckTrigger": true}
	var names []string
	for _, m := range pelwardenv1.Admin_ServiceDesc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range pelwardenv1.Admin_ServiceDesc.Streams {
		names = append(names, s.StreamName)
	}
	for _, name := range names {
		full := "/" + pelwardenv1.Admin_ServiceDesc.ServiceName + "/" + name
		_, guarded := requiredClass[full]
		require.NotEqual(t, readOnly[name], guarded, "%s must be either read-only or in requiredClass", name)
	}
	require.Equal(t, workerClass, required(pelwardenv1.Admin_Deregister_FullMethodName, &pelwardenv1.DeregisterRequest{}))
	require.Equal(t, operatorClass, required(pelwardenv1.Admin_Findings_FullMethodName, &pelwardenv1.FindingsRequest{SampleMs: 1}))
	require.Equal(t, nobody, required(pelwardenv1.Admin_Findings_FullMethodName, &pelwardenv1.FindingsRequest{}))
	require.Equal(t, operatorClass, required(pelwardenv1.Admin_Reclaim_FullMethodName, &pelwardenv1.ReclaimRequest{}))
	require.Equal(t, nobody, required(pelwardenv1.Admin_Reclaim_FullMethodName, &pelwardenv1.ReclaimRequest{DryRun: true}))
}

func TestTheWorkerTokenAllowsDeregisterOnlyAndIsReadAgainWhenItChanges(t *testing.T) {
	t.Parallel()
	workerFile := tokenFile(t, workerToken)
	client := dial(t, serveAdmin(t, config.Admin{TokenFile: tokenFile(t, token), WorkerTokenFile: workerFile}, nil), nil)
	as := func(tok string) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	deregister := func(tok string) error {
		_, err := client.Deregister(as(tok), &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}, Consumer: "w-0"})
		return err
	}
	target := &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}

	require.NoError(t, deregister(workerToken))
	err := deleteConsumer(client, "Bearer "+workerToken)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "needs the operator credential; worker bearer token is a worker credential")
	_, err = client.Findings(as(workerToken), &pelwardenv1.FindingsRequest{Target: target, SampleMs: 10})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a MONITOR sample is the operator's: %v", err)
	require.NoError(t, deleteConsumer(client, "Bearer "+token), "the operator's token keeps everything")
	require.NoError(t, deregister(token))

	const rotated = "the-rotated-worker-token-0123"
	require.NoError(t, os.WriteFile(workerFile, []byte(rotated), 0o600))
	require.Equal(t, codes.PermissionDenied, status.Code(deregister(workerToken)), "the old worker token stops working")
	require.NoError(t, deregister(rotated))
}

// TestAScopedWorkerTokenReachesOnlyItsStreams: a token of
// admin.workerTokens allows Deregister on the streams its globs match, and
// nothing else; the unscoped worker token reaches every stream.
func TestAScopedWorkerTokenReachesOnlyItsStreams(t *testing.T) {
	t.Parallel()
	const mailToken, jobsToken = "a-worker-token-for-mail-only", "a-worker-token-for-jobs-only"
	client := dial(t, serveAdmin(t, config.Admin{WorkerTokens: []config.WorkerToken{
		{TokenFile: tokenFile(t, mailToken), Streams: []string{"mail", "mail:*"}},
		{TokenFile: tokenFile(t, jobsToken), Streams: []string{"job?"}},
	}}, nil), nil)
	deregister := func(tok, stream string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		_, err := client.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: stream, Group: "workers"}, Consumer: "w-0"})
		return err
	}
	err := deregister(mailToken, "jobs")
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `worker bearer token of admin.workerTokens[0] may deregister consumers on streams mail, mail:* only, not on "jobs"`)
	require.NoError(t, deregister(jobsToken, "jobs"), "the token whose glob matches the stream")
	require.Equal(t, codes.PermissionDenied, status.Code(deleteConsumer(client, "Bearer "+jobsToken)), "a scoped worker token allows only Deregister")
}
