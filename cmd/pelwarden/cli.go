package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/internal/config"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// commit, likewise, names the commit where Go's own VCS stamp is missing
// (a git worktree, whose .git is a file, gets none).
var version, commit = "dev", ""

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // pelwarden started and then failed
	exitUsage   = 2 // bad flags, arguments or configuration: nothing was started
)

// runFunc runs pelwarden until ctx ends; app.Run in production.
type runFunc func(ctx context.Context, cfg config.Config) error

// exitError ends a command with a status once its message has been printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// execute runs the command line args against env and returns the exit
// status. It touches nothing of the process but what it is handed, except
// for signal handling and reading the files the configuration names.
func execute(args []string, env func(string) (string, bool), stdout, stderr io.Writer, runApp runFunc) int {
	root := newRootCommand(env, stdout, stderr, runApp)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.Background())
	var exit *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exit):
		return exit.code
	default:
		// Cobra's own errors: unknown command or flag, bad flag value or
		// unexpected arguments.
		fmt.Fprintf(stderr, "pelwarden: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
}

func newRootCommand(env func(string) (string, bool), stdout, stderr io.Writer, runApp runFunc) *cobra.Command {
	const short = "Ghost-aware KEDA external scaler and PEL hygiene for Redis Streams consumer groups"
	root := &cobra.Command{
		Use:   "pelwarden",
		Short: short,
		Long: short + `.

pelwarden reports the work waiting on a Redis Streams consumer group to KEDA,
leaving out the entries that dead ("ghost") consumers hold, and gives those
entries back to live workers.`,
		SilenceErrors:     true, // execute prints errors, once
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCommand(env, stderr, runApp), newVersionCommand(stdout), newCompletionCommand(stdout))
	root.AddCommand(adminCommands(env, stderr)...)
	return root
}

const serveLong = `Serve the KEDA ExternalScaler and pelwarden.v1.Admin gRPC APIs and the
/metrics, /healthz and /readyz HTTP endpoints until SIGINT or SIGTERM.

Configuration is built in layers, each overriding the one before: defaults,
the YAML file named by --config, PELWARDEN_* environment variables, flags.
An environment variable set to the empty string counts as unset. The
PELWARDEN_REDIS_* variables and --redis-* flags set the Redis connection named
"default", creating it if the file has none, so this is a complete setup:

  pelwarden serve --redis-addr 127.0.0.1:6379

and so are a Redis Cluster and a master watched by Redis Sentinel:

  pelwarden serve --redis-cluster-addrs redis-0:6379,redis-1:6379
  pelwarden serve --redis-sentinel-addrs s-0:26379,s-1:26379 --redis-sentinel-master mymaster

A Redis password is never read from the YAML file or a flag: name it with
passwordEnv or passwordFile in the file, PELWARDEN_REDIS_PASSWORD, or
--redis-password-file (the sentinels' own: PELWARDEN_REDIS_SENTINEL_PASSWORD
or --redis-sentinel-password-file).

With --grpc-tls-cert and --grpc-tls-key (grpc.tls) the gRPC port speaks TLS
only, and with --grpc-tls-client-ca it requires client certificates; changed
files are picked up without a restart. The HTTP endpoints stay plain HTTP for
probes and scrapes.

The Admin RPCs that change a group (Reclaim, DeleteConsumer, Deregister)
are refused until admin.tokenFile (--admin-token-file) or
admin.allowedClientIdentities names who may call them. A worker's
credential, admin.workerTokenFile (--admin-worker-token-file) or a client
certificate under admin.workerIdentityPrefix, allows Deregister only.

A ScaledObject's trigger metadata asks for hygiene only as far as the
triggers section allows: by default (--triggers-reclaim off) triggers read
metrics only, judged by idle time, and groups to look after are listed in
hygiene.targets. Deleting originals, the carry field, another dead-letter
stream, hard timeouts and claim are never a trigger's to ask. What can mark
a consumer dead for hygiene comes from the liveness profiles of
triggers.profiles; a group of triggers acts only after --triggers-warm-up,
so that each of its triggers has polled.

The garbage collector runs at GOGC=130 unless GOGC is set: fewer
collections, so fewer polls wait for one, for a little more memory.

Environment variables (variable, flag, config path it sets):
`

const serveExit = `
Exit status: 0 after a clean shutdown, 1 if serving failed, 2 for bad flags
or configuration (every problem is listed, each naming its field).`

func newServeCommand(env func(string) (string, bool), stderr io.Writer, runApp runFunc) *cobra.Command {
	var flags *config.Flags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the KEDA external scaler, the Admin API and the metrics and health endpoints",
		Long:  serveLong + config.EnvUsage() + serveExit,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Sources{Env: env, ReadFile: os.ReadFile}, flags)
			if err != nil {
				printConfigError(stderr, err)
				return &exitError{code: exitUsage}
			}
			setGCPercent(env)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := runApp(ctx, cfg); err != nil {
				fmt.Fprintf(stderr, "pelwarden: %v\n", err)
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	flags = config.NewFlags(cmd.Flags())
	return cmd
}

// gcPercent is the garbage collector's GOGC when the environment sets
// none. A server of KEDA's polls allocates a few KiB a call beside a heap
// of long-lived snapshots, one per trigger; polls that arrive while a
// collection marks wait for it (docs/performance.md). At 130 collections
// run about three quarters as often as at Go's 100 there, for about 8%
// more memory at 10,000 hygiene groups; 150 put that process within a
// few MB of its 128 MB budget, for a tail no better once the reads ahead
// went in small batches.
const gcPercent = 130

// setGCPercent sets the collector to gcPercent unless GOGC is set, which
// the Go runtime has then applied.
func setGCPercent(env func(string) (string, bool)) {
	if _, ok := env("GOGC"); !ok {
		debug.SetGCPercent(gcPercent)
	}
}

// printConfigError lists each configuration problem on its own line.
func printConfigError(w io.Writer, err error) {
	fmt.Fprintln(w, "pelwarden: invalid configuration:")
	var cfgErr *config.Error
	if !errors.As(err, &cfgErr) {
		fmt.Fprintf(w, "  %v\n", err)
		return
	}
	for _, p := range cfgErr.Problems {
		fmt.Fprintf(w, "  %v\n", p)
	}
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the pelwarden version, the commit it was built from and its Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info, _ := debug.ReadBuildInfo()
			_, err := fmt.Fprint(stdout, versionText(version, commit, info))
			return err
		},
	}
}

// versionText names the release (set with -ldflags), the commit (from the
// build information Go records with -buildvcs=true in a git checkout, as
// make build does, else from -ldflags) and the toolchain.
func versionText(release, stamped string, info *debug.BuildInfo) string {
	revision, goVersion := "unknown (built without VCS stamping)", runtime.Version()
	if stamped != "" {
		revision = stamped
	}
	if info != nil {
		goVersion = info.GoVersion
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			revision = rev
			if settings["vcs.modified"] == "true" {
				revision += " (with uncommitted changes)"
			}
		}
	}
	return fmt.Sprintf("version: %s\ncommit:  %s\ngo:      %s %s/%s\n", release, revision, goVersion, runtime.GOOS, runtime.GOARCH)
}
