package findings

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/redisx"
)

const (
	// maxLine bounds one MONITOR line held in memory; longer lines (large
	// XADDs) are skipped, as no consumer command is that long.
	maxLine = 64 << 10
	// maxSampledNames bounds the consumer names one sample remembers.
	maxSampledNames = 10000
	// maxListedAddrs bounds the connections named in one finding.
	maxListedAddrs = 10
	// handshakeTimeout bounds AUTH and MONITOR where the client sets no
	// read timeout.
	handshakeTimeout = 3 * time.Second
)

// nameUse maps a consumer name to the connections ("ip:port") that used it,
// each with a count per command.
type nameUse map[string]map[string]map[string]int

// sampleNames watches MONITOR for d on a connection of its own and records
// which connections name each consumer of stream/group in XREADGROUP,
// XCLAIM or XAUTOCLAIM. XACK names no consumer, and commands a script runs
// show no client address, so neither can be attributed. go-redis's Monitor
// hands the monitoring connection back to the pool while still reading it,
// so the sample dials its own with the client's options. In a cluster it
// watches the master of the stream's slot, where the workers' reads land.
func sampleNames(ctx context.Context, c redis.UniversalClient, stream, group string, d time.Duration) (nameUse, error) {
	node, err := redisx.NodeForKey(ctx, c, stream)
	if err != nil {
		return nil, fmt.Errorf("MONITOR for %s: %w", stream, err)
	}
	opts := node.Options()
	conn, rd, err := openMonitor(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("MONITOR on %s: %w", opts.Addr, err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return nil, fmt.Errorf("MONITOR on %s: %w", opts.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()

	use := nameUse{}
	for {
		line, err := readLine(rd)
		var ne net.Error
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("MONITOR on %s: %w", opts.Addr, ctx.Err())
		case errors.As(err, &ne) && ne.Timeout():
			return use, nil // the sample is over
		case err != nil:
			return nil, fmt.Errorf("MONITOR on %s: %w", opts.Addr, err)
		case strings.HasPrefix(line, "-"):
			return nil, fmt.Errorf("MONITOR on %s: %s", opts.Addr, line[1:])
		}
		use.record(line, opts.DB, stream, group)
	}
}

// openMonitor dials the client's server, authenticates as the client
// does, and sends MONITOR.
func openMonitor(ctx context.Context, opts *redis.Options) (net.Conn, *bufio.Reader, error) {
	conn, err := opts.Dialer(ctx, opts.Network, opts.Addr)
	if err != nil {
		return nil, nil, err
	}
	rd := bufio.NewReaderSize(conn, maxLine)
	timeout := opts.ReadTimeout
	if timeout <= 0 {
		timeout = handshakeTimeout
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	err = conn.SetDeadline(deadline)
	if err == nil {
		err = handshake(ctx, opts, conn, rd)
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, rd, nil
}

func handshake(ctx context.Context, opts *redis.Options, conn net.Conn, rd *bufio.Reader) error {
	user, pass, err := credentials(ctx, opts)
	if err != nil {
		return err
	}
	if pass != "" {
		args := []string{"AUTH", pass}
		if user != "" {
			args = []string{"AUTH", user, pass}
		}
		if err := call(conn, rd, args...); err != nil {
			return fmt.Errorf("AUTH: %w", err)
		}
	}
	return call(conn, rd, "MONITOR")
}

func credentials(ctx context.Context, o *redis.Options) (user, pass string, err error) {
	switch {
	case o.StreamingCredentialsProvider != nil:
		return "", "", errors.New("a streaming credentials provider is not supported by the MONITOR sample")
	case o.CredentialsProviderContext != nil:
		return o.CredentialsProviderContext(ctx)
	case o.CredentialsProvider != nil:
		user, pass = o.CredentialsProvider()
		return user, pass, nil
	}
	return o.Username, o.Password, nil
}

// call sends one command in RESP2 and reads its status reply.
func call(conn net.Conn, rd *bufio.Reader, args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return err
	}
	reply, err := readLine(rd)
	switch {
	case err != nil:
		return err
	case strings.HasPrefix(reply, "-"):
		return errors.New(reply[1:])
	case !strings.HasPrefix(reply, "+"):
		return fmt.Errorf("unexpected reply %q to %s", reply, args[0])
	}
	return nil
}

// readLine reads one line without its CRLF; a line longer than maxLine is
// skipped and read as "".
func readLine(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return strings.TrimRight(string(line), "\r\n"), err
	}
	for errors.Is(err, bufio.ErrBufferFull) {
		_, err = rd.ReadSlice('\n')
	}
	return "", err
}

func (u nameUse) record(line string, db int, stream, group string) {
	m, ok := parseMonitorLine(line)
	if !ok || m.db != db || m.addr == "lua" {
		return
	}
	consumer, cmd, ok := consumerOf(m.args, stream, group)
	if !ok {
		return
	}
	addrs, ok := u[consumer]
	if !ok {
		if len(u) >= maxSampledNames {
			return
		}
		addrs = map[string]map[string]int{}
		u[consumer] = addrs
	}
	if addrs[m.addr] == nil {
		addrs[m.addr] = map[string]int{}
	}
	addrs[m.addr][cmd]++
}

// mergeShared adds a SharedName finding for every name the sample saw on
// more than one connection, or adds to the one the snapshot gave.
func mergeShared(out []Finding, use nameUse, sample time.Duration) []Finding {
	names := make([]string, 0, len(use))
	for name, addrs := range use {
		if len(addrs) > 1 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		d := sharedDetail(use[name], sample)
		i := slices.IndexFunc(out, func(f Finding) bool { return f.Kind == SharedName && f.Consumer == name })
		if i >= 0 {
			out[i].Detail += "; " + d
			continue
		}
		out = append(out, Finding{Kind: SharedName, Consumer: name, Detail: d})
	}
	return out
}

func sharedDetail(addrs map[string]map[string]int, sample time.Duration) string {
	keys := make([]string, 0, len(addrs))
	for a := range addrs {
		keys = append(keys, a)
	}
	slices.Sort(keys)
	parts := make([]string, 0, min(len(keys), maxListedAddrs)+1)
	for _, a := range keys[:min(len(keys), maxListedAddrs)] {
		cmds := make([]string, 0, len(addrs[a]))
		for cmd, n := range addrs[a] {
			cmds = append(cmds, strconv.Itoa(n)+" "+cmd)
		}
		slices.Sort(cmds)
		parts = append(parts, a+" ("+strings.Join(cmds, ", ")+")")
	}
	if len(keys) > maxListedAddrs {
		parts = append(parts, fmt.Sprintf("and %d more", len(keys)-maxListedAddrs))
	}
	return fmt.Sprintf("a %s MONITOR sample saw the name used from %d connections: %s. Two readers under one name share one PEL, "+
		"so each may be handed the other's entries; this is reported even when the connections belong to one process, which is "+
		"the same bug. A reclaimer that XCLAIMs entries to this name from outside a script also counts as a connection",
		sample, len(keys), strings.Join(parts, ", "))
}
