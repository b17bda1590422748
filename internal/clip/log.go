package clip

import (
	"context"
	"fmt"
	"log/slog"
)

// MaxLogValue bounds every string a log line carries, in bytes: the
// message and each attribute's value. Names of streams, groups and
// consumers, namespaces, metadata values quoted in errors: whatever a
// caller chose reaches the log cut to this, by Unique, so that two
// targets cut alike are still told apart. 512 bytes holds every message
// pelwarden writes and the longest error Redis answers with.
const MaxLogValue = 512

// Own is text pelwarden made itself and logs whole, such as the stack of
// a recovered panic: it holds no caller's string, and cut it would be
// useless.
type Own string

// LogValue implements slog.LogValuer.
func (o Own) LogValue() slog.Value { return slog.StringValue(string(o)) }

// Handler is a slog.Handler that clips every string value of a record,
// its message included, to MaxLogValue before the next handler sees it.
// It sits in front of pelwarden's log handler, so no log line anywhere
// in the process can carry a caller's megabyte.
type Handler struct{ next slog.Handler }

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler {
	if h, ok := next.(*Handler); ok {
		return h
	}
	return &Handler{next: next}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler. It copies the record only when one of
// its values is too long, which pelwarden's own lines never are.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	long := len(r.Message) > MaxLogValue
	r.Attrs(func(a slog.Attr) bool {
		long = long || tooLong(a.Value)
		return !long
	})
	if !long {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, Unique(r.Message, MaxLogValue), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(Attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clipped := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clipped[i] = Attr(a)
	}
	return &Handler{next: h.next.WithAttrs(clipped)}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(Unique(name, MaxLogValue))}
}

// tooLong reports whether v, resolved, holds a string longer than
// MaxLogValue.
func tooLong(v slog.Value) bool {
	if own(v) {
		return false
	}
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return len(v.String()) > MaxLogValue
	case slog.KindGroup:
		for _, a := range v.Group() {
			if len(a.Key) > MaxLogValue || tooLong(a.Value) {
				return true
			}
		}
		return false
	case slog.KindAny:
		return len(anyText(v.Any())) > MaxLogValue
	default:
		return false
	}
}

// Attr returns a with its key and every string in its value cut to
// MaxLogValue. A value of another kind that prints longer (an error, a
// list) becomes its printed text, cut.
func Attr(a slog.Attr) slog.Attr {
	a.Key = Unique(a.Key, MaxLogValue)
	if own(a.Value) {
		return a
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Unique(v.String(), MaxLogValue))
	case slog.KindGroup:
		group := v.Group()
		clipped := make([]slog.Attr, len(group))
		for i, g := range group {
			clipped[i] = Attr(g)
		}
		a.Value = slog.GroupValue(clipped...)
	case slog.KindAny:
		if s := anyText(v.Any()); len(s) > MaxLogValue {
			a.Value = slog.StringValue(Unique(s, MaxLogValue))
		} else {
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}

func own(v slog.Value) bool {
	if v.Kind() != slog.KindLogValuer {
		return false
	}
	_, ok := v.LogValuer().(Own)
	return ok
}

// anyText is how a handler would print v.
func anyText(v any) string {
	switch x := v.(type) {
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	default:
		return fmt.Sprint(v)
	}
}
