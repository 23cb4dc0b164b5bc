// Package logbridge turns a *slog.Logger into a *zap.Logger, so that the
// packages that log (checkpoint, migrate) keep one logging path, zap's,
// whichever of the two loggers a program hands them.
//
// New wraps the slog.Handler in a zapcore.Core: an entry's level maps to
// slog's (Debug, Info, Warn and Error to the same levels; DPanic, Panic and
// Fatal above Error), its message and time are the record's, and its fields
// become attributes: each field is encoded by zapcore into a
// zapcore.MapObjectEncoder, so an ObjectMarshaler (a restore Report) becomes
// a group with the same keys, an ArrayMarshaler a list, a zap.Namespace a
// group holding the fields after it. Fields given to With go to the
// handler's WithAttrs once, as zap's own cores do.
//
// # Caveats
//
//   - What the handler sees is what the zap fields hold, no more: the
//     packages that log never put a value in a field (keys, counts, paths),
//     and the bridge adds nothing but the logger's name ("logger") and a
//     stack trace ("stacktrace") when zap took one.
//   - Keys of one field that zapcore encodes as several (zap.Error's "error"
//     and "errorVerbose") come in the order of their names; fields keep
//     their order.
//   - The handler's errors are returned by Write, which zap reports to its
//     error output; Sync does nothing (a slog.Handler has nothing to flush).
//   - The record carries the caller's program counter only when the zap
//     logger was built to take it (zap.AddCaller); the packages here do not.
package logbridge

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a *zap.Logger whose every entry goes to l's handler, or nil
// for a nil l (the callers' "no logger").
func New(l *slog.Logger) *zap.Logger {
	if l == nil {
		return nil
	}
	return zap.New(&core{h: l.Handler()})
}

// core is a zapcore.Core that forwards to a slog.Handler. It holds no state
// of its own: the handler is safe for concurrent use, and so is the core.
type core struct {
	h slog.Handler
}

var _ zapcore.Core = (*core)(nil)

// Level maps a zap level to slog's. Levels between slog's named ones are
// allowed, and print as ERROR+1 and so on.
func Level(l zapcore.Level) slog.Level {
	switch l {
	case zapcore.DebugLevel:
		return slog.LevelDebug
	case zapcore.InfoLevel:
		return slog.LevelInfo
	case zapcore.WarnLevel:
		return slog.LevelWarn
	case zapcore.ErrorLevel:
		return slog.LevelError
	}
	if l < zapcore.DebugLevel {
		return slog.LevelDebug
	}
	return slog.LevelError + slog.Level(l-zapcore.ErrorLevel) // DPanic, Panic, Fatal
}

// Enabled asks the handler.
func (c *core) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), Level(l))
}

// With gives the fields to the handler's WithAttrs, a zap.Namespace
// among them to WithGroup.
func (c *core) With(fields []zapcore.Field) zapcore.Core {
	h := c.h
	for len(fields) > 0 {
		i := slices.IndexFunc(fields, isNamespace)
		if i < 0 {
			i = len(fields)
		}
		if attrs := attrsOf(fields[:i]); len(attrs) > 0 {
			h = h.WithAttrs(attrs)
		}
		if i == len(fields) {
			break
		}
		h = h.WithGroup(fields[i].Key)
		fields = fields[i+1:]
	}
	return &core{h: h}
}

// Check adds the core to ce when the handler takes the entry's level.
func (c *core) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

// Write hands the entry to the handler as one record.
func (c *core) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	t := ent.Time
	if t.IsZero() {
		t = time.Now()
	}
	var pc uintptr
	if ent.Caller.Defined {
		pc = ent.Caller.PC
	}
	r := slog.NewRecord(t, Level(ent.Level), ent.Message, pc)
	if ent.LoggerName != "" {
		r.AddAttrs(slog.String("logger", ent.LoggerName))
	}
	r.AddAttrs(attrsOf(fields)...)
	if ent.Stack != "" {
		r.AddAttrs(slog.String("stacktrace", ent.Stack))
	}
	return c.h.Handle(context.Background(), r)
}

// Sync does nothing: a slog.Handler has no buffer to flush.
func (c *core) Sync() error { return nil }

func isNamespace(f zapcore.Field) bool { return f.Type == zapcore.NamespaceType }

// attrsOf converts fields, in order, into attributes; the fields after a
// zap.Namespace go into a group of its name.
func attrsOf(fields []zapcore.Field) []slog.Attr {
	attrs := make([]slog.Attr, 0, len(fields))
	for i, f := range fields {
		if isNamespace(f) {
			return append(attrs, slog.Attr{Key: f.Key, Value: slog.GroupValue(attrsOf(fields[i+1:])...)})
		}
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		attrs = append(attrs, attrsOfMap(enc.Fields)...)
	}
	return attrs
}

// attrsOfMap converts what a MapObjectEncoder holds, in the order of the
// keys (the map keeps none).
func attrsOfMap(m map[string]any) []slog.Attr {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Attr{Key: k, Value: valueOf(m[k])})
	}
	return attrs
}

// valueOf converts one encoded value: an object (a map) into a group; a
// list stays a list (slog has no list kind; a handler prints it as any
// value, its objects as maps); the rest as slog.AnyValue does, which keeps
// strings, numbers, bools, durations and times as their kinds.
func valueOf(v any) slog.Value {
	if m, ok := v.(map[string]any); ok {
		return slog.GroupValue(attrsOfMap(m)...)
	}
	return slog.AnyValue(v)
}
