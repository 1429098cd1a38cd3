package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Formats are the values of --log-format.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Options configure New.
type Options struct {
	// Level is debug, info, warn or error (default info).
	Level string
	// Format is text (default) or json.
	Format string
	// ReplaceAttr is slog's hook, for tests that pin the time.
	ReplaceAttr func(groups []string, a slog.Attr) *slog.Attr
}

// New is a logger writing to w as opts say; an unknown level or format is
// an error naming the flag.
func New(w io.Writer, opts Options) (*slog.Logger, error) {
	var level slog.Level
	if opts.Level != "" {
		if err := level.UnmarshalText([]byte(opts.Level)); err != nil {
			return nil, fmt.Errorf("--log-level %q: give debug, info, warn or error", opts.Level)
		}
	}
	ho := &slog.HandlerOptions{Level: level}
	if opts.ReplaceAttr != nil {
		ra := opts.ReplaceAttr
		ho.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if r := ra(groups, a); r != nil {
				return *r
			}
			return slog.Attr{}
		}
	}
	var h slog.Handler
	switch strings.ToLower(opts.Format) {
	case "", FormatText:
		h = slog.NewTextHandler(w, ho)
	case FormatJSON:
		h = slog.NewJSONHandler(w, ho)
	default:
		return nil, fmt.Errorf("--log-format %q: give text or json", opts.Format)
	}
	return slog.New(traceHandler{h}), nil
}

// traceHandler adds the trace and span IDs of the record's context.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
