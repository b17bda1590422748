package findings

import (
	"slices"
	"strconv"
	"strings"
)

// monitorLine is one line of MONITOR output:
//
//	+1700000000.123456 [0 127.0.0.1:51234] "XREADGROUP" "GROUP" "g" "c" ...
type monitorLine struct {
	db   int
	addr string // "ip:port", "[ipv6]:port", "unix:/path" or "lua"
	args []string
}

func parseMonitorLine(line string) (monitorLine, bool) {
	line = strings.TrimPrefix(line, "+")
	q := strings.IndexByte(line, '"')
	if q < 0 {
		return monitorLine{}, false
	}
	head := line[:q]
	open, end := strings.IndexByte(head, '['), strings.LastIndexByte(head, ']')
	if open < 0 || end < open {
		return monitorLine{}, false
	}
	dbText, addr, ok := strings.Cut(head[open+1:end], " ")
	db, err := strconv.Atoi(dbText)
	if !ok || err != nil || addr == "" {
		return monitorLine{}, false
	}
	args, ok := splitQuoted(line[q:])
	if !ok || len(args) == 0 {
		return monitorLine{}, false
	}
	return monitorLine{db: db, addr: addr, args: args}, true
}

// splitQuoted reads the space-separated quoted arguments of a MONITOR
// line, undoing Redis's escapes (\\ \" \n \r \t \a \b \xHH).
func splitQuoted(s string) ([]string, bool) {
	var args []string
	for len(s) > 0 {
		if s[0] == ' ' {
			s = s[1:]
			continue
		}
		if s[0] != '"' {
			return nil, false
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' {
				b.WriteByte(s[i])
				continue
			}
			i++
			if i >= len(s) {
				return nil, false
			}
			c, width, ok := unescape(s[i:])
			if !ok {
				return nil, false
			}
			b.WriteByte(c)
			i += width - 1
		}
		if i >= len(s) {
			return nil, false
		}
		args = append(args, b.String())
		s = s[i+1:]
	}
	return args, true
}

// unescape reads the escape after a backslash; width is the bytes it took.
func unescape(s string) (c byte, width int, ok bool) {
	switch s[0] {
	case 'n':
		return '\n', 1, true
	case 'r':
		return '\r', 1, true
	case 't':
		return '\t', 1, true
	case 'a':
		return '\a', 1, true
	case 'b':
		return '\b', 1, true
	case 'x':
		if len(s) < 3 {
			return 0, 0, false
		}
		v, err := strconv.ParseUint(s[1:3], 16, 8)
		if err != nil {
			return 0, 0, false
		}
		return byte(v), 3, true
	default:
		return s[0], 1, true
	}
}

// consumerOf returns the consumer a command names in stream's group:
// XREADGROUP reads as it, XCLAIM and XAUTOCLAIM claim to it.
func consumerOf(args []string, stream, group string) (consumer, cmd string, ok bool) {
	if len(args) < 4 {
		return "", "", false
	}
	cmd = strings.ToUpper(args[0])
	switch cmd {
	case "XCLAIM", "XAUTOCLAIM":
		if args[1] == stream && args[2] == group {
			return args[3], cmd, true
		}
	case "XREADGROUP":
		if strings.EqualFold(args[1], "GROUP") && args[2] == group && readsStream(args[4:], stream) {
			return args[3], cmd, true
		}
	}
	return "", "", false
}

// readsStream says whether the options and STREAMS part of an XREADGROUP
// name stream among its keys.
func readsStream(opts []string, stream string) bool {
	for i := 0; i < len(opts); i++ {
		switch strings.ToUpper(opts[i]) {
		case "COUNT", "BLOCK", "CLAIM":
			i++
		case "NOACK":
		case "STREAMS":
			rest := opts[i+1:]
			return slices.Contains(rest[:len(rest)/2], stream)
		default:
			return false
		}
	}
	return false
}
