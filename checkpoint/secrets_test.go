package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// The secret tests put the marker in values and drive every encode and
// decode error path of File and Memory (Save, Commit, Load, the upgrade
// path, the header): no error text and no log field may contain it.

// secretValue has a field of each kind whose encoding/json error quotes
// the value: a json.Number, types whose (Un)MarshalJSON or MarshalText
// errors quote what they were given, and decoders that quote their input
// (netip.Addr, time.Time).
type secretValue struct {
	Num  json.Number `json:"num,omitempty"`
	IP   netip.Addr  `json:"ip,omitzero"`
	At   time.Time   `json:"at,omitzero"`
	Raw  rawValue    `json:"raw,omitempty"`
	Fail quotingJSON `json:"fail,omitzero"`
	Text quotingText `json:"text,omitzero"`
}

// rawValue's MarshalJSON returns what it holds, valid JSON or not.
type rawValue string

func (r rawValue) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// quotingJSON's MarshalJSON and UnmarshalJSON fail, quoting the value.
type quotingJSON struct{ S string }

func (q quotingJSON) MarshalJSON() ([]byte, error) {
	if q.S == "" {
		return []byte(`""`), nil
	}
	return nil, fmt.Errorf("cannot encode %s", q.S)
}

func (q *quotingJSON) UnmarshalJSON(b []byte) error {
	if string(b) == `""` {
		return nil
	}
	return fmt.Errorf("cannot decode %s", b)
}

// quotingText's MarshalText fails, quoting the value.
type quotingText struct{ S string }

func (q quotingText) MarshalText() ([]byte, error) {
	if q.S == "" {
		return nil, nil
	}
	return nil, fmt.Errorf("cannot encode %s", q.S)
}

func (q *quotingText) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return fmt.Errorf("cannot decode %s", b)
}

// unencodable are values that fail to encode with an error whose text
// (from encoding/json or from the type) quotes the marker.
var unencodable = map[string]secretValue{
	"json.Number":          {Num: json.Number(marker)},
	"MarshalJSON error":    {Fail: quotingJSON{marker}},
	"MarshalText error":    {Text: quotingText{marker}},
	"MarshalJSON not JSON": {Raw: rawValue(`{"token": ` + marker + `}`)},
	"MarshalJSON trailing": {Raw: rawValue(`"` + marker + `" ` + marker)},
}

// undecodable are entry values (JSON) whose decoding error quotes the
// marker, and one with an unknown field holding it.
var undecodable = map[string]string{
	"json.Number":   `{"num":"` + marker + `"}`,
	"netip.Addr":    `{"ip":"` + marker + `"}`,
	"time.Time":     `{"at":"` + marker + `"}`,
	"UnmarshalJSON": `{"fail":"` + marker + `"}`,
	"UnmarshalText": `{"text":"` + marker + `"}`,
	"wrong type":    `{"ip":["` + marker + `"]}`,
	"unknown field": `{"num":1,"token":"` + marker + `"}`,
	"not JSON":      `{"num":` + marker + `}`,
}

// noMarker fails t if the marker is in err's text or in any log entry.
func noMarker(t *testing.T, err error, logs *observer.ObservedLogs, what string) {
	t.Helper()
	if err != nil {
		assert.NotContains(t, err.Error(), marker, "%s: a value reached the error", what)
		assert.NotContains(t, fmt.Sprintf("%+v", err), marker, "%s: a value reached the error (%%+v)", what)
	}
	for _, e := range logs.TakeAll() {
		assert.NotContains(t, e.Message, marker, "%s: a value reached the log", what)
		for k, f := range e.ContextMap() {
			assert.NotContains(t, fmt.Sprint(f), marker, "%s: a value reached log field %s", what, k)
		}
	}
}

// TestNoValueInEncodeErrors saves and commits values that cannot be
// encoded, on a File and a Memory: each fails with ErrEncode, and neither
// the error nor the log shows the value.
//
// How it failed before the fix: the encoder's and the types' error texts
// were passed through with %v ("checkpoint entry cannot be encoded: value
// of key a: json: invalid number literal \"sk-live-5ecret\"", "... json:
// error calling MarshalJSON for type checkpoint_test.quotingJSON: cannot
// encode sk-live-5ecret", the same for MarshalText).
func TestNoValueInEncodeErrors(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	f, err := checkpoint.Open[string, secretValue](ctx, filepath.Join(t.TempDir(), "s.json"), checkpoint.WithLogger(log))
	require.NoError(t, err)
	defer f.Close()
	m := checkpointtest.NewMemory[string, secretValue](t, checkpoint.WithLogger(log))
	for _, be := range []struct {
		name string
		b    interface {
			Save(context.Context, checkpoint.Snapshot[string, secretValue]) error
			Commit(context.Context, checkpoint.Meta, []checkpoint.Change[string, secretValue]) error
		}
	}{{"file", f}, {"memory", m}} {
		for name, v := range unencodable {
			what := be.name + ", " + name
			err := be.b.Save(ctx, checkpoint.Snapshot[string, secretValue]{Entries: map[string]secretValue{"a": v}})
			require.ErrorIs(t, err, checkpoint.ErrEncode, what)
			assert.Contains(t, err.Error(), `"a"`, "%s: the error names the key", what)
			noMarker(t, err, logs, what+", Save")
			err = be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, secretValue]{{Key: "b", Value: secretValue{}}, {Key: "a", Value: v}})
			require.ErrorIs(t, err, checkpoint.ErrEncode, what)
			noMarker(t, err, logs, what+", Commit")
		}
	}
}

// TestNoValueInDecodeErrors loads files (intact, checksum and all) whose
// entries do not decode, with errors that quote the value, on a File and a
// Memory, directly and through the upgrade path; and a file whose header
// does not decode. Neither the errors nor the log may show the value.
//
// How it failed before the fix: a header field that does not decode was
// reported with encoding/json's text ("the header is not valid: parsing
// time \"\\\"sk-live-5ecret\\\"\" ..."), and so were entries on the upgrade
// path whose raw JSON did not parse.
func TestNoValueInDecodeErrors(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	// The header holds no value, but encoding/json's text about it must
	// not pass through either.
	body := "{\n  \"format\": 1,\n  \"schema\": 1,\n  \"phase\": \"\",\n  \"writer\": \"\",\n  \"bootID\": \"\",\n  \"seq\": 1,\n  \"savedAt\": \"" + marker + "\",\n  \"entries\": [\n  ],\n"
	hm := checkpoint.NewMemory[string, secretValue]()
	checkpointtest.SetBytes(hm, []byte(body+sealFor(body)))
	_, err := hm.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "savedAt")
	noMarker(t, err, logs, "header")
	var perr *os.PathError
	assert.True(t, errors.As(err, &perr))
	assert.True(t, strings.HasPrefix(err.Error(), "checkpoint load memory"), err.Error())

	entries := map[string]string{"good": `{"num":1}`}
	for name, v := range undecodable {
		entries[name] = v
	}
	file := sealedFile(entries)

	identity := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
	for _, opts := range [][]checkpoint.Option{nil, {checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, identity)}} {
		opts = append(opts, checkpoint.WithLogger(log))
		what := fmt.Sprintf("%d options", len(opts))
		path := filepath.Join(t.TempDir(), "s.json")
		require.NoError(t, os.WriteFile(path, file, 0o600))
		f, err := checkpoint.Open[string, secretValue](ctx, path, opts...)
		require.NoError(t, err)
		_, err = f.Load(ctx)
		require.Error(t, err, what)
		noMarker(t, err, logs, what+", File.Load")
		_, err = f.Quarantine(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		noMarker(t, nil, logs, what+", File.Quarantine")

		m := checkpointtest.NewMemory[string, secretValue](t, opts...)
		checkpointtest.SetBytes(m, file)
		_, err = m.Load(ctx)
		require.Error(t, err, what)
		noMarker(t, err, logs, what+", Memory.Load")

		// One entry at a time, so that no error hides behind another.
		for name, v := range undecodable {
			m := checkpointtest.NewMemory[string, secretValue](t, opts...)
			checkpointtest.SetBytes(m, sealedFile(map[string]string{name: v}))
			_, err := m.Load(ctx)
			require.Error(t, err, "%s: %s", what, name)
			assert.Contains(t, err.Error(), name, "%s: the error names the key", what)
			noMarker(t, err, logs, what+", "+name)
		}
	}

}

// sealedFile returns an intact checkpoint file (schema 1) whose entries
// have the given keys and raw values, valid JSON or not, as a writer that
// does not check its output would write them.
func sealedFile(entries map[string]string) []byte {
	var lines []string
	for k, v := range entries {
		kj, _ := json.Marshal(k)
		lines = append(lines, `    {"key":`+string(kj)+`,"value":`+v+`}`)
	}
	body := "{\n  \"format\": 1,\n  \"schema\": 1,\n  \"phase\": \"\",\n  \"writer\": \"\",\n  \"bootID\": \"\",\n  \"seq\": 1,\n  \"savedAt\": \"2026-11-30T08:00:00Z\",\n  \"entries\": [\n" + strings.Join(lines, ",\n") + "\n  ],\n"
	return []byte(body + sealFor(body))
}

// TestJournalErrorsNeverQuoteValues attacks "Errors and logs name
// paths, keys ..., never a value" for the journal: a record whose value
// does not decode, one with a field the type lacks, a damaged record
// before the last and a torn last record, each with a secret in its
// value; neither the error nor the log may hold it.
func TestJournalErrorsNeverQuoteValues(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cr3t-T0KEN"
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	w, err := checkpoint.Open[string, any](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, any]{Entries: map[string]any{"a": map[string]any{"n": 1}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "b", Value: map[string]any{"n": secret}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "c", Value: map[string]any{"n": 2, "tok": secret}}}))
	require.NoError(t, w.Close())
	journal, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	require.Contains(t, string(journal), secret)

	type val struct {
		N int `json:"n"`
	}
	check := func(name string, opts ...checkpoint.Option) error {
		t.Helper()
		core, logs := observer.New(zap.DebugLevel)
		r, err := checkpoint.Open[string, val](ctx, path, append(opts, checkpoint.WithJournal(), checkpoint.WithLogger(zap.New(core)))...)
		require.NoError(t, err)
		defer r.Close()
		_, lerr := r.Load(ctx)
		require.Error(t, lerr, name)
		assert.NotContains(t, lerr.Error(), secret, name)
		assert.NotContains(t, fmt.Sprintf("%+v", lerr), secret, name)
		cerr := r.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, val]{{Key: "z", Value: val{}}})
		if cerr != nil {
			assert.NotContains(t, cerr.Error(), secret, name)
		}
		for _, e := range logs.All() {
			assert.NotContains(t, e.Message, secret, name)
			for _, f := range e.Context {
				assert.NotContains(t, fmt.Sprint(f.Interface, f.String), secret, name)
			}
		}
		return lerr
	}
	// b's value is a string where an int is expected; c has a field val lacks.
	err = check("undecodable value")
	assert.True(t, errors.Is(err, checkpoint.ErrBadEntry) || errors.Is(err, checkpoint.ErrTypeMismatch), "%v", err)
	err = check("unknown field dropped", checkpoint.WithDropUnknownFields())
	assert.ErrorIs(t, err, checkpoint.ErrBadEntry)

	// Damage the first record's value (corruption) and cut the last in
	// the middle of its secret (torn).
	first := bytes.IndexByte(journal, '\n')
	bad := bytes.Clone(journal)
	at := bytes.Index(bad, []byte(secret))
	require.Less(t, at, first)
	bad[at] ^= 0x20
	cut := bytes.LastIndex(journal, []byte(secret)) + 4
	bad = bad[:cut]
	require.NoError(t, os.WriteFile(path+".journal", bad, 0o600))
	err = check("damaged record")
	assert.ErrorIs(t, err, checkpoint.ErrCorrupt)

	// Only the torn tail: Load succeeds, and the torn record's report and
	// log hold no value.
	require.NoError(t, os.WriteFile(path+".journal", journal[:cut], 0o600))
	core, logs := observer.New(zap.DebugLevel)
	r, err := checkpoint.Open[string, any](ctx, path, checkpoint.WithJournal(), checkpoint.WithLogger(zap.New(core)))
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Load(ctx)
	require.NoError(t, err)
	require.NotNil(t, r.Journal().Torn)
	assert.NotContains(t, r.Journal().Torn.Error(), secret)
	assert.NotContains(t, r.Journal().Torn.Reason, "s3cr")
	require.Positive(t, logs.Len())
	for _, e := range logs.All() {
		assert.NotContains(t, e.Message, "s3cr")
		for _, f := range e.Context {
			assert.NotContains(t, fmt.Sprint(f.Interface, f.String), "s3cr")
		}
	}
}

// TestSlogNeverSeesAValue attacks "never values" through WithSlog: a
// journal whose records hold a secret, read with the lines that log
// (unknown fields dropped, a torn last record discarded, the file moved
// aside); the slog handler gets those lines, and none holds the secret.
func TestSlogNeverSeesAValue(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cr3t-T0KEN"
	path := filepath.Join(t.TempDir(), "s.json")
	w, err := checkpoint.Open[string, any](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, any]{Entries: map[string]any{"a": map[string]any{"n": 1, "tok": secret}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "b", Value: map[string]any{"n": 2, "tok": secret}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "c", Value: map[string]any{"n": 3, "tok": secret}}}))
	require.NoError(t, w.Close())
	journal, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path+".journal", journal[:bytes.LastIndex(journal, []byte(secret))+4], 0o600))

	type val struct {
		N int `json:"n"`
	}
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	r, err := checkpoint.Open[string, val](ctx, path, checkpoint.WithJournal(), checkpoint.WithDropUnknownFields(), checkpoint.WithSlog(slog.New(h)))
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Load(ctx)
	require.NoError(t, err)
	_, err = r.Quarantine(ctx)
	require.NoError(t, err)

	out := buf.String()
	for _, msg := range []string{"dropped unknown fields", "torn last record", "moved the checkpoint aside"} {
		assert.Contains(t, out, msg, "the handler gets the line")
	}
	assert.NotContains(t, out, "s3cr")
}
