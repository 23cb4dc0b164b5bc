package logbridge_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/internal/logbridge"
)

// report is an ObjectMarshaler with a nested list, as a restore Report is.
type report struct{}

func (report) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("restored", 3)
	enc.AddString("readFrom", "checkpoint")
	return enc.AddArray("orphanedKeys", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
		a.AppendString("vm-1")
		a.AppendString("vm-2")
		return nil
	}))
}

// lines decodes the JSON handler's output, one record a line.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestBridgeKeepsLevelsAndKeys logs through a bridged zap logger into a
// slog JSON handler and checks each record's level, message and
// attributes: plain fields, an error, a duration, an object and a list
// (as groups and lists), fields given to With, a namespace, and the
// logger's name.
func TestBridgeKeepsLevelsAndKeys(t *testing.T) {
	var buf bytes.Buffer
	log := logbridge.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log = log.With(zap.String("phase", "migrate"))
	log.Debug("d", zap.Int("count", 2))
	log.Info("restored", zap.Object("report", report{}))
	log.Warn("checkpoint quarantined", zap.String("to", "/x.corrupt"), zap.Error(errors.New("bad")), zap.Duration("waited", 2*time.Second))
	log.Named("lock").Error("e", zap.Namespace("ns"), zap.Int("inner", 1))
	log.With(zap.Namespace("w"), zap.Int("a", 1)).Info("grouped", zap.Int("b", 2))
	require.NoError(t, log.Sync())

	got := lines(t, &buf)
	require.Len(t, got, 5)
	for _, r := range got {
		assert.Equal(t, "migrate", r["phase"], "With's field on every record")
	}
	assert.Equal(t, "DEBUG", got[0]["level"])
	assert.Equal(t, float64(2), got[0]["count"])
	assert.Equal(t, "INFO", got[1]["level"])
	assert.Equal(t, "restored", got[1]["msg"])
	assert.Equal(t, map[string]any{"restored": float64(3), "readFrom": "checkpoint", "orphanedKeys": []any{"vm-1", "vm-2"}}, got[1]["report"])
	assert.Equal(t, "WARN", got[2]["level"])
	assert.Equal(t, "/x.corrupt", got[2]["to"])
	assert.Equal(t, "bad", got[2]["error"])
	assert.Equal(t, float64(2*time.Second), got[2]["waited"])
	assert.Equal(t, "ERROR", got[3]["level"])
	assert.Equal(t, "lock", got[3]["logger"])
	assert.Equal(t, map[string]any{"inner": float64(1)}, got[3]["ns"])
	assert.Equal(t, map[string]any{"a": float64(1), "b": float64(2)}, got[4]["w"])
}

// TestBridgeAsksTheHandlerForLevels: a handler at Warn gets no Info
// record, and zap's Check says so before any field is built.
func TestBridgeAsksTheHandlerForLevels(t *testing.T) {
	var buf bytes.Buffer
	log := logbridge.New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	assert.Nil(t, log.Check(zapcore.InfoLevel, "no"))
	assert.NotNil(t, log.Check(zapcore.WarnLevel, "yes"))
	log.Info("no")
	log.Warn("yes")
	got := lines(t, &buf)
	require.Len(t, got, 1)
	assert.Equal(t, "yes", got[0]["msg"])
	assert.Nil(t, logbridge.New(nil), "nil is no logger")
}

// TestLevel maps every zap level.
func TestLevel(t *testing.T) {
	for zl, want := range map[zapcore.Level]slog.Level{
		zapcore.DebugLevel: slog.LevelDebug, zapcore.InfoLevel: slog.LevelInfo,
		zapcore.WarnLevel: slog.LevelWarn, zapcore.ErrorLevel: slog.LevelError,
		zapcore.DPanicLevel: slog.LevelError + 1, zapcore.PanicLevel: slog.LevelError + 2, zapcore.FatalLevel: slog.LevelError + 3,
	} {
		assert.Equal(t, want, logbridge.Level(zl), zl.String())
	}
}
