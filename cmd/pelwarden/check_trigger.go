package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func newCheckTriggerCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var namespace string
	var md map[string]string
	cmd := &cobra.Command{
		Use:   "check-trigger",
		Short: "Say whether pelwarden's trigger policy admits a ScaledObject trigger, changing nothing",
		Long: `Ask a running pelwarden how it would answer a KEDA trigger with this
metadata from this ScaledObject namespace: whether its metric is served, and
whether its hygiene request (reclaim and the hygiene keys) would be admitted
under the configured triggers policy. Nothing is registered; quotas are not
checked. Exits 1 when either would be refused, so CI can lint ScaledObjects:

  pelwarden check-trigger --namespace jobs \
    --metadata stream=jobs,consumerGroup=workers,reclaim=requeue`,
	}
	cmd.Flags().StringVar(&namespace, "namespace", "", "the ScaledObject's namespace")
	cmd.Flags().StringToStringVar(&md, "metadata", nil, "the trigger's metadata, key=value,...")
	return adminCommand(env, stderr, cmd, false, func(s *session) error {
		if len(md) == 0 {
			return usageError("--metadata is required")
		}
		ctx, cancel := s.call()
		defer cancel()
		res, err := s.client.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: namespace, Metadata: md})
		if err != nil {
			return err
		}
		if s.flags.output == "json" {
			if err := printJSON(s.out, res); err != nil {
				return err
			}
		} else {
			renderCheck(s.out, res)
		}
		return checkVerdict(res)
	})
}

func renderCheck(w io.Writer, res *pelwardenv1.CheckTriggerResponse) {
	defer func() {
		for _, n := range res.GetNotes() {
			fmt.Fprintf(w, "note     %s\n", n)
		}
	}()
	if res.GetCode() != codes.OK.String() {
		fmt.Fprintf(w, "metric   refused %s: %s\n", res.GetCode(), res.GetMessage())
		return
	}
	fmt.Fprintln(w, "metric   served")
	switch r := res.GetHygieneRefusal(); {
	case !res.GetAsksHygiene():
		fmt.Fprintln(w, "hygiene  not asked for")
	case r == nil:
		fmt.Fprintln(w, "hygiene  admitted")
	default:
		fmt.Fprintf(w, "hygiene  refused %s %s: %s\n", r.GetCode(), or(r.GetKey(), "-"), r.GetMessage())
	}
}

// checkVerdict fails the command when the trigger would be refused in any
// part, with the code a KEDA call (or its hygiene) would get.
func checkVerdict(res *pelwardenv1.CheckTriggerResponse) error {
	if res.GetCode() != codes.OK.String() {
		return status.Error(codeOf(res.GetCode()), res.GetMessage())
	}
	if r := res.GetHygieneRefusal(); r != nil {
		return status.Errorf(codeOf(r.GetCode()), "hygiene refused: %s", r.GetMessage())
	}
	return nil
}

// codeOf reads a code in the form codes.Code.String writes.
func codeOf(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}
