package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

const checkTriggerLong = `Say how pelwarden would answer a KEDA trigger: whether its metric is
served, and whether its hygiene request (reclaim and the hygiene keys) would
be admitted under the triggers policy. Nothing is registered; quotas are not
checked. Exits 1 when any part of any trigger would be refused, so CI can
lint ScaledObjects.

The triggers come from a ScaledObject (or ScaledJob) file, each of its
triggers of type external or external-push, in the object's namespace:

  pelwarden check-trigger -f scaledobject.yaml

or from one trigger's metadata, one key=value a flag (a value may hold
commas), or as a JSON object:

  pelwarden check-trigger --namespace jobs \
    --metadata stream=jobs --metadata consumerGroup=workers --metadata reclaim=requeue
  pelwarden check-trigger --namespace jobs --metadata-json '{"stream":"jobs","consumerGroup":"workers"}'

With --config the answer comes from that configuration file (and the
PELWARDEN_* variables), with no pelwarden running and no Redis; passwords
are not read, and the files it names for TLS, tokens and a kubeconfig need
not exist, so the chart's rendered config.yaml lints ScaledObjects in CI.
Without it, the pelwarden at --server answers.`

// checkTriggerFlags are check-trigger's own flags.
type checkTriggerFlags struct {
	namespace, file, config, metadataJSON string
	metadata                              []string
}

func newCheckTriggerCommand(env func(string) (string, bool), stderr io.Writer) *cobra.Command {
	var f checkTriggerFlags
	cmd := &cobra.Command{
		Use:   "check-trigger (-f FILE | --metadata KEY=VALUE... | --metadata-json JSON)",
		Short: "Say whether pelwarden's trigger policy admits a ScaledObject's triggers, changing nothing",
		Long:  checkTriggerLong,
	}
	cmd.Flags().StringVar(&f.namespace, "namespace", "", "the ScaledObject's namespace (default: the file's metadata.namespace)")
	cmd.Flags().StringVarP(&f.file, "filename", "f", "", "a ScaledObject or ScaledJob YAML file (several documents may follow one another)")
	cmd.Flags().StringVar(&f.config, "config", "", "answer from this pelwarden configuration file, offline, instead of asking --server")
	cmd.Flags().StringArrayVar(&f.metadata, "metadata", nil, "one key=value of the trigger's metadata (repeatable; the value may hold commas)")
	cmd.Flags().StringVar(&f.metadataJSON, "metadata-json", "", `the trigger's metadata as a JSON object of strings, {"stream":"jobs",...}`)
	return adminCommand(env, stderr, cmd, false, func(s *session) error {
		triggers, err := f.triggers()
		if err != nil {
			return usageError(err.Error())
		}
		check, err := f.checker(s, env)
		if err != nil {
			return err
		}
		answers := make([]*pelwardenv1.CheckTriggerResponse, len(triggers))
		for i, tr := range triggers {
			if answers[i], err = check(tr.request()); err != nil {
				return fmt.Errorf("%s: %w", tr.name, err)
			}
		}
		if err := printChecks(s.out, s.flags.format(), triggers, answers); err != nil {
			return err
		}
		return checkVerdicts(triggers, answers)
	})
}

// checker is how a trigger is checked: offline from --config, or by the
// pelwarden the session reaches.
func (f checkTriggerFlags) checker(s *session, env func(string) (string, bool)) (func(*pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error), error) {
	if f.config == "" {
		return func(req *pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error) {
			ctx, cancel := s.call()
			defer cancel()
			return s.client.CheckTrigger(ctx, req)
		}, nil
	}
	fileEnv := func(name string) (string, bool) {
		if name == config.EnvConfig {
			return f.config, true
		}
		return env(name)
	}
	cfg, err := config.Load(config.Sources{Env: fileEnv, ReadFile: os.ReadFile, NoSecrets: true}, nil)
	if err != nil {
		var buf strings.Builder
		printConfigError(&buf, err)
		return nil, errors.New(strings.TrimSpace(strings.TrimPrefix(buf.String(), "pelwarden: ")))
	}
	check, err := app.OfflineCheck(cfg)
	if err != nil {
		return nil, err
	}
	return func(req *pelwardenv1.CheckTriggerRequest) (*pelwardenv1.CheckTriggerResponse, error) {
		return admin.CheckTriggerWith(s.parent, check, req)
	}, nil
}

// printChecks prints each trigger's answer: the API's messages in order
// with -o json or yaml, else a block each, named when from a file.
func printChecks(w io.Writer, f format, triggers []checkedTrigger, answers []*pelwardenv1.CheckTriggerResponse) error {
	if f.structured() {
		if len(answers) == 1 {
			return printMessage(w, f, answers[0])
		}
		return printMessages(w, f, answers)
	}
	for i, res := range answers {
		if len(triggers) > 1 || triggers[i].fromFile {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s\n", triggers[i].name)
		}
		renderCheck(w, res)
	}
	return nil
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

// checkVerdicts fails the command when any trigger would be refused in
// any part: with the code a KEDA call (or its hygiene) would get for one
// trigger, with every refusal listed for several.
func checkVerdicts(triggers []checkedTrigger, answers []*pelwardenv1.CheckTriggerResponse) error {
	var refused []error
	for i, res := range answers {
		if err := checkVerdict(res); err != nil {
			refused = append(refused, err)
			if len(triggers) > 1 || triggers[i].fromFile {
				st := status.Convert(err)
				refused[len(refused)-1] = status.Errorf(st.Code(), "%s: %s", triggers[i].name, st.Message())
			}
		}
	}
	switch len(refused) {
	case 0:
		return nil
	case 1:
		return refused[0]
	}
	lines := make([]string, len(refused))
	for i, err := range refused {
		st := status.Convert(err)
		lines[i] = "  " + st.Code().String() + ": " + st.Message()
	}
	return fmt.Errorf("%d of %d triggers would be refused:\n%s", len(refused), len(answers), strings.Join(lines, "\n"))
}

// checkVerdict is one trigger's refusal, naming the key refused.
func checkVerdict(res *pelwardenv1.CheckTriggerResponse) error {
	if res.GetCode() != codes.OK.String() {
		return status.Error(codeOf(res.GetCode()), res.GetMessage())
	}
	if r := res.GetHygieneRefusal(); r != nil {
		if r.GetKey() != "" {
			return status.Errorf(codeOf(r.GetCode()), "hygiene refused, key %s: %s", r.GetKey(), r.GetMessage())
		}
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
