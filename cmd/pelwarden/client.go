package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Variables the admin commands read when their flag is not given.
const (
	envServer    = "PELWARDEN_SERVER"
	envToken     = "PELWARDEN_TOKEN"      //nolint:gosec // G101: a variable name, not a credential
	envTokenFile = "PELWARDEN_TOKEN_FILE" //nolint:gosec // G101: a variable name, not a credential
)

// clientFlags are the flags every admin command shares: where pelwarden
// is, how to reach it, and how to print.
type clientFlags struct {
	server     string
	tokenFile  string
	tlsOn      bool
	ca         string
	cert, key  string
	serverName string
	output     string
	timeout    time.Duration

	redis, stream, group string
}

func (f *clientFlags) register(fs *pflag.FlagSet, env func(string) (string, bool)) {
	server := "localhost:9090"
	if v, ok := env(envServer); ok && v != "" {
		server = v
	}
	tokenFile, _ := env(envTokenFile)
	fs.StringVar(&f.server, "server", server, "pelwarden's gRPC address, host:port (env "+envServer+")")
	fs.StringVar(&f.tokenFile, "token-file", tokenFile, "file holding the bearer token mutating calls need: the operator's, or the workers' for deregister (env "+envTokenFile+", or the token itself in "+envToken+")")
	fs.BoolVar(&f.tlsOn, "tls", false, "connect with TLS (implied by --tls-ca, --tls-cert)")
	fs.StringVar(&f.ca, "tls-ca", "", "CA bundle (PEM) that verifies pelwarden; empty means the system roots")
	fs.StringVar(&f.cert, "tls-cert", "", "client certificate (PEM) for mutual TLS")
	fs.StringVar(&f.key, "tls-key", "", "client key (PEM) for mutual TLS")
	fs.StringVar(&f.serverName, "tls-server-name", "", "name to verify in pelwarden's certificate; empty means the host of --server")
	fs.StringVarP(&f.output, "output", "o", string(formatTable), "output format: table, wide (every column, every reason whole), json or yaml")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "deadline of each call")
	fs.StringVar(&f.redis, "redis", "", `Redis connection name of the target; empty means "default"`)
	fs.StringVar(&f.stream, "stream", "", "stream of the target")
	fs.StringVar(&f.group, "group", "", "consumer group of the target")
}

// check validates the flags before anything is dialed.
func (f *clientFlags) check(needTarget bool) error {
	switch {
	case !f.format().valid():
		return fmt.Errorf("--output must be table, wide, json or yaml, got %q", f.output)
	case (f.cert == "") != (f.key == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	case needTarget && (f.stream == "" || f.group == ""):
		return errors.New("--stream and --group are required")
	case (f.stream == "") != (f.group == ""):
		return errors.New("--stream and --group go together")
	}
	return nil
}

func (f *clientFlags) format() format { return format(f.output) }

func (f *clientFlags) target() *pelwardenv1.TargetRef {
	if f.stream == "" {
		return nil
	}
	return &pelwardenv1.TargetRef{Redis: f.redis, Stream: f.stream, Group: f.group}
}

// tlsHint says which TLS flag a connection that failed in its handshake
// wants: gRPC's own message names the symptom, not the flag.
func (f *clientFlags) tlsHint(err error) string {
	if status.Code(err) != codes.Unavailable {
		return ""
	}
	msg := status.Convert(err).Message()
	tlsOn := f.tlsOn || f.ca != "" || f.cert != ""
	switch {
	case !tlsOn && (strings.Contains(msg, "server preface") || strings.Contains(msg, "first record does not look like a TLS handshake")):
		return "pelwarden may serve TLS: pass --tls-ca, and --tls-cert and --tls-key where it asks for a client certificate"
	case tlsOn && strings.Contains(msg, "x509: certificate is valid for"):
		return "the certificate names another host: pass the name it holds with --tls-server-name (through a port-forward, pelwarden.<namespace>.svc)"
	case tlsOn && strings.Contains(msg, "certificate signed by unknown authority"):
		return "pass the CA that signed pelwarden's certificate with --tls-ca"
	case tlsOn && f.cert == "" && (strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate")):
		return "pelwarden asks for a client certificate: pass --tls-cert and --tls-key"
	case tlsOn && f.cert == "" && hungUp(msg):
		return "pelwarden closed the connection, as it does when it asks for a client certificate: pass --tls-cert and --tls-key"
	}
	return ""
}

// hungUp says the server closed the connection. Under TLS 1.3 a server
// checks the client's certificate after the client has finished its side
// of the handshake, so a client without one may write into the closed
// connection before it reads the server's alert.
func hungUp(msg string) bool {
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, ": EOF")
}

// dial connects to pelwarden's Admin API.
func (f *clientFlags) dial() (pelwardenv1.AdminClient, func(), error) {
	creds := insecure.NewCredentials()
	if f.tlsOn || f.ca != "" || f.cert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
		if f.ca != "" {
			pem, err := os.ReadFile(f.ca)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("--tls-ca: %s holds no PEM certificate", f.ca)
			}
		}
		if f.cert != "" {
			pair, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(f.server, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("--server %s: %w", f.server, err)
	}
	return pelwardenv1.NewAdminClient(conn), func() { _ = conn.Close() }, nil
}

// session is one admin command's connection to pelwarden.
type session struct {
	client pelwardenv1.AdminClient
	flags  *clientFlags
	out    io.Writer
	parent context.Context
	token  string
}

// call returns the context of one call: bounded by --timeout, and carrying
// the bearer token when there is one.
func (s *session) call() (context.Context, context.CancelFunc) {
	return s.callFor(s.flags.timeout)
}

// callFor is call with a longer deadline, for calls that take time by
// design.
func (s *session) callFor(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(s.parent, d)
	if s.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.token)
	}
	return ctx, cancel
}

func (f *clientFlags) token(env func(string) (string, bool)) (string, error) {
	if f.tokenFile == "" {
		token, _ := env(envToken)
		return token, nil
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// printJSON writes a response as indented JSON with the proto's JSON field
// names. protojson varies its whitespace on purpose, so the output is
// re-indented to be stable for scripts and golden files.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := marshalJSON(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func marshalJSON(m proto.Message) ([]byte, error) {
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// adminCommand makes cmd talk to the Admin API: it checks the flags,
// dials, and hands do a session. Errors from pelwarden print their gRPC
// code and message, and exit 1.
func adminCommand(env func(string) (string, bool), stderr io.Writer, cmd *cobra.Command, needTarget bool,
	do func(s *session) error,
) *cobra.Command {
	f := &clientFlags{}
	f.register(cmd.Flags(), env)
	names := make([]string, len(formats))
	for i, x := range formats {
		names[i] = string(x)
	}
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.check(needTarget); err != nil {
			return err // a usage error: exit 2
		}
		token, err := f.token(env)
		if err != nil {
			return err
		}
		client, closeConn, err := f.dial()
		if err != nil {
			return err
		}
		defer closeConn()
		s := &session{client: client, flags: f, out: cmd.OutOrStdout(), parent: cmd.Context(), token: token}
		if err := do(s); err != nil {
			var usage *usageErr
			if errors.As(err, &usage) {
				return err // a usage error: exit 2
			}
			if st, ok := status.FromError(err); ok {
				fmt.Fprintf(stderr, "pelwarden: %s: %s\n", st.Code(), st.Message())
			} else {
				fmt.Fprintf(stderr, "pelwarden: %v\n", err)
			}
			if hint := f.tlsHint(err); hint != "" {
				fmt.Fprintf(stderr, "pelwarden: %s\n", hint)
			}
			return &exitError{code: exitFailure}
		}
		return nil
	}
	return cmd
}
