package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// adminCommands are the operator commands that talk to a running
// pelwarden's Admin API.
func adminCommands(env func(string) (string, bool), stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{
		newStatusCommand(env, stderr),
		newPlanCommand(env, stderr),
		newReclaimCommand(env, stderr),
		newDeregisterCommand(env, stderr),
		newFindingsCommand(env, stderr),
		newCheckTriggerCommand(env, stderr),
	}
}

const targetHelp = `

Without --stream and --group it covers every target pelwarden has
registered: those KEDA has polled and those hygiene.targets lists.`

func newStatusCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each target's consumers with verdict, pending and idle, then totals",
		Long: `Show each target's consumers as pelwarden judges them: verdict, pending
entries, idle time, heartbeat age, pod, owner and every reason, then totals.
Each target says how old its numbers are. Exits 1 when a target's latest
read failed (Redis down): its numbers are then stale, shown with their age.` + targetHelp,
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval of --watch")
	return adminCommand(env, stderr, cmd, false, func(s *session) error {
		if !watch {
			failed, err := statusOnce(s, false)
			if err == nil && len(failed) > 0 {
				err = fmt.Errorf("the latest read of %d target(s) failed, so their numbers are stale: %s", len(failed), strings.Join(failed, ", "))
			}
			return err
		}
		if interval <= 0 {
			return fmt.Errorf("--interval must be positive, got %s", interval)
		}
		ctx, stop := signal.NotifyContext(s.parent, os.Interrupt, syscall.SIGTERM)
		defer stop()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if _, err := statusOnce(s, true); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
}

// statusOnce prints the targets once and returns those whose latest read
// failed.
func statusOnce(s *session, live bool) ([]string, error) {
	ctx, cancel := s.call()
	defer cancel()
	var targets []*pelwardenv1.Target
	var described *pelwardenv1.DescribeTargetResponse
	var res proto.Message
	if ref := s.flags.target(); ref != nil {
		d, err := s.client.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: ref})
		if err != nil {
			return nil, err
		}
		targets, described, res = []*pelwardenv1.Target{d.GetTarget()}, d, d
	} else {
		l, err := s.client.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
		if err != nil {
			return nil, err
		}
		targets, res = l.GetTargets(), l
	}
	if f := s.flags.format(); f.structured() {
		var n statusTotals
		for _, t := range targets {
			n.add(t)
		}
		return n.failed, printMessage(s.out, f, res)
	}
	if live {
		clearScreen(s.out)
		fmt.Fprintf(s.out, "pelwarden status at %s (every refresh; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly))
	}
	failed, err := renderStatus(s.out, targets, s.flags.format())
	if err != nil {
		return nil, err
	}
	return failed, renderHygiene(s.out, described)
}

// clearScreen clears a terminal between --watch frames; a pipe or file
// gets the frames one after another.
func clearScreen(w io.Writer) {
	if f, ok := w.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprint(w, "\033[H\033[2J")
		}
	}
}

func newPlanCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what hygiene would do now, and why, changing nothing",
		Long: `Show, per consumer, what the hygiene loop would do now: requeue, claim,
dead-letter, delete the consumer, or nothing, with how many entries and why.
It changes nothing.` + targetHelp,
	}
	return adminCommand(env, stderr, cmd, false, func(s *session) error {
		refs, err := targetRefs(s)
		if err != nil {
			return err
		}
		plans := make([]*pelwardenv1.PlanResponse, 0, len(refs))
		for _, ref := range refs {
			ctx, cancel := s.call()
			res, err := s.client.Plan(ctx, &pelwardenv1.PlanRequest{Target: ref})
			cancel()
			if err != nil {
				return err
			}
			plans = append(plans, res)
		}
		if f := s.flags.format(); f.structured() {
			if len(plans) == 1 {
				return printMessage(s.out, f, plans[0])
			}
			return printMessages(s.out, f, plans)
		}
		return renderPlans(s.out, plans, s.flags.format())
	})
}

// targetRefs is the target of the flags, or every registered one.
func targetRefs(s *session) ([]*pelwardenv1.TargetRef, error) {
	if ref := s.flags.target(); ref != nil {
		return []*pelwardenv1.TargetRef{ref}, nil
	}
	ctx, cancel := s.call()
	defer cancel()
	res, err := s.client.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var refs []*pelwardenv1.TargetRef
	for _, t := range res.GetTargets() {
		key := t.GetRedis() + "\x00" + t.GetStream() + "\x00" + t.GetGroup()
		if !seen[key] {
			seen[key] = true
			refs = append(refs, &pelwardenv1.TargetRef{Redis: t.GetRedis(), Stream: t.GetStream(), Group: t.GetGroup()})
		}
	}
	return refs, nil
}

func newReclaimCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var consumer, mode string
	var ids []string
	var dryRun, force bool
	cmd := &cobra.Command{
		Use:   "reclaim (--consumer NAME | --id ID...) --stream S --group G",
		Short: "Give back a consumer's entries, or specific entries, through the guarded scripts",
		Long: `Give back every entry of one consumer past its reclaim threshold, or the
entries named with --id, through the same guarded scripts as the hygiene
loop: each entry is checked, in the script that moves it, to be pending,
owned as expected and idle enough. Needs a bearer token (--token-file) or
an allowed mTLS client certificate.`,
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "reclaim this consumer's entries")
	cmd.Flags().StringSliceVar(&ids, "id", nil, "reclaim this entry id (repeatable, or comma-separated)")
	cmd.Flags().StringVar(&mode, "mode", "requeue", "requeue or claim")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would happen; change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "reclaim from an owner that is not a ghost (entries idle past entryStaleSeconds)")
	return adminCommand(env, stderr, cmd, true, func(s *session) error {
		req := &pelwardenv1.ReclaimRequest{Target: s.flags.target(), Mode: mode, DryRun: dryRun, Force: force}
		switch {
		case (consumer == "") == (len(ids) == 0):
			return usageError("exactly one of --consumer and --id is required")
		case consumer != "":
			req.Selector = &pelwardenv1.ReclaimRequest_Consumer{Consumer: consumer}
		default:
			req.Selector = &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: ids}}
		}
		ctx, cancel := s.call()
		defer cancel()
		res, err := s.client.Reclaim(ctx, req)
		if err != nil {
			return err
		}
		if f := s.flags.format(); f.structured() {
			return printMessage(s.out, f, res)
		}
		return renderReclaim(s.out, res)
	})
}

func newDeregisterCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var consumer string
	cmd := &cobra.Command{
		Use:   "deregister --consumer NAME --stream S --group G",
		Short: "Requeue a departing worker's entries, then delete its consumer",
		Long: `Do what a worker does in graceful shutdown, after it stopped reading and
finished its in-flight work: requeue every entry of its pending list, then
delete its consumer. Running it again is harmless. Needs a bearer token
(--token-file): the workers' token (admin.workerTokenFile) or the
operator's; or an mTLS client certificate that is allowed, or whose URI SAN
under admin.workerIdentityPrefix names this consumer.`,
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer to deregister (required)")
	return adminCommand(env, stderr, cmd, true, func(s *session) error {
		if consumer == "" {
			return usageError("--consumer is required")
		}
		ctx, cancel := s.call()
		defer cancel()
		res, err := s.client.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: s.flags.target(), Consumer: consumer})
		if err != nil {
			return err
		}
		if f := s.flags.format(); f.structured() {
			return printMessage(s.out, f, res)
		}
		gone := "deleted"
		if !res.GetConsumerDeleted() {
			gone = "already gone"
		}
		_, err = fmt.Fprintf(s.out, "%s: requeued %d, dead-lettered %d, consumer %s\n", consumer, res.GetRequeued(), res.GetDeadLettered(), gone)
		return err
	})
}

func newFindingsCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var minDeliveries int64
	var sample time.Duration
	cmd := &cobra.Command{
		Use:   "findings",
		Short: "Report shared consumer names, consumers with no pod or owner, bouncing entries, tombstones and NULL lag",
		Long: `Report what looks wrong in the targets' groups: consumer names used by more
than one process, consumers whose owner matches no pod or nothing at all,
entries delivered many times, pending entries whose stream entry was
deleted, and groups whose lag Redis reports as NULL.` + targetHelp,
	}
	cmd.Flags().Int64Var(&minDeliveries, "min-deliveries", 0, "report entries delivered at least this often; 0 is the target's maxDeliveries, or 3")
	cmd.Flags().DurationVar(&sample, "sample", 0, "watch this long (Redis MONITOR) for one name read from two connections; 0 skips it")
	return adminCommand(env, stderr, cmd, false, func(s *session) error {
		if minDeliveries < 0 || sample < 0 {
			return usageError("--min-deliveries and --sample must not be negative")
		}
		ctx, cancel := s.callFor(s.flags.timeout + sample)
		defer cancel()
		res, err := s.client.Findings(ctx, &pelwardenv1.FindingsRequest{Target: s.flags.target(), MinDeliveries: minDeliveries, SampleMs: sample.Milliseconds()})
		if err != nil {
			return err
		}
		if f := s.flags.format(); f.structured() {
			return printMessage(s.out, f, res)
		}
		return renderFindings(s.out, res.GetFindings(), s.flags.format())
	})
}

// usageErr is a mistake on the command line found after flag parsing.
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(msg string) error { return &usageErr{msg: msg} }
