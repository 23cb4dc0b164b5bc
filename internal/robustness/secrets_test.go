package robustness_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// apiKey is the marker of TestNoValueInStoreErrors, in every bad value.
const apiKey = "sk-live-5ecret"

// tokenValue has fields whose encoding/json errors quote the value.
type tokenValue struct {
	Limit json.Number `json:"limit,omitempty"`
	Seal  sealer      `json:"seal,omitzero"`
	Since time.Time   `json:"since,omitzero"`
}

// sealer's MarshalJSON and UnmarshalJSON fail, quoting the value.
type sealer struct{ S string }

func (s sealer) MarshalJSON() ([]byte, error) {
	if s.S == "" {
		return []byte(`""`), nil
	}
	return nil, fmt.Errorf("cannot seal %s", s.S)
}

func (s *sealer) UnmarshalJSON(b []byte) error {
	if string(b) == `""` {
		return nil
	}
	return fmt.Errorf("cannot unseal %s", b)
}

// TestNoValueInStoreErrors drives a Store through every encode path (Put
// and Update, alone and in group commits with good writes) and every
// decode path at Restore (entries that do not decode, an entry with an
// unknown field; strict and not) with the marker in the values, and
// requires that no error, Report and log line shows it.
//
// How it failed before the fix: migrate re-marshalled the value to word
// the error and passed encoding/json's text through, so a Put of a
// json.Number holding the marker returned, and logged, "json: invalid
// number literal \"sk-live-5ecret\"", and a failing MarshalJSON's own text.
func TestNoValueInStoreErrors(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	clean := func(what string, errs ...error) {
		t.Helper()
		for _, err := range errs {
			if err != nil {
				assert.NotContains(t, err.Error(), apiKey, "%s: a value reached an error", what)
			}
		}
		for _, e := range logs.TakeAll() {
			line := e.Message + " " + toString(e.ContextMap())
			assert.NotContains(t, strings.ToLower(line), strings.ToLower(apiKey), "%s: a value reached the log: %s", what, line)
		}
	}
	bad := map[string]tokenValue{
		"number":      {Limit: json.Number(apiKey)},
		"marshaljson": {Seal: sealer{apiKey}},
	}

	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		path := filepath.Join(t.TempDir(), "tokens.json")
		cp, err := checkpoint.Open[string, tokenValue](ctx, path, checkpoint.WithLogger(log))
		require.NoError(t, err)
		legacy := &migratetest.Explicit[string, tokenValue]{}
		s, err := migrate.New(migrate.Config[string, tokenValue]{Phase: p, Legacy: legacy, Checkpoint: cp, Logger: log})
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		for name, v := range bad {
			what := p.String() + ", " + name
			err := s.Put(ctx, "tok-"+name, v)
			require.ErrorIs(t, err, checkpoint.ErrEncode, what)
			assert.Contains(t, err.Error(), "tok-"+name, "%s: the error names the key", what)
			clean(what+", Put", err)
			err = s.Update(ctx, func(tx *migrate.Tx[string, tokenValue]) error {
				tx.Put("good", tokenValue{Limit: "1"})
				tx.Put("tok-"+name, v)
				return nil
			})
			require.ErrorIs(t, err, checkpoint.ErrEncode, what)
			clean(what+", Update", err)
			// In a group commit with good writes: each bad one fails alone.
			errs := make(chan error, 8)
			for i := range 8 {
				go func() {
					if i%2 == 0 {
						errs <- s.Put(ctx, fmt.Sprintf("good-%d", i), tokenValue{Limit: "2"})
					} else {
						errs <- s.Put(ctx, fmt.Sprintf("bad-%d", i), v)
					}
				}()
			}
			var got []error
			for range 8 {
				got = append(got, <-errs)
			}
			clean(what+", group commit", got...)
		}
		assert.Len(t, collect(s), 4, "%s: the good writes, and only they, were stored", p)
		require.NoError(t, s.Close())
	}

	// Restore from files whose entries do not decode, with errors that
	// would quote the value.
	entries := map[string]json.RawMessage{
		"good":    json.RawMessage(`{"limit":1}`),
		"number":  json.RawMessage(`{"limit":"` + apiKey + `"}`),
		"seal":    json.RawMessage(`{"seal":"` + apiKey + `"}`),
		"since":   json.RawMessage(`{"since":"` + apiKey + `"}`),
		"unknown": json.RawMessage(`{"limit":1,"secret":"` + apiKey + `"}`),
	}
	for name, v := range entries {
		for _, strict := range []bool{false, true} {
			for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
				what := fmt.Sprintf("restore %s, %s, strict=%v", name, p, strict)
				raw := checkpoint.NewMemory[string, json.RawMessage]()
				require.NoError(t, raw.Save(ctx, checkpoint.Snapshot[string, json.RawMessage]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]json.RawMessage{"good": entries["good"], name: v}}))
				path := filepath.Join(t.TempDir(), "tokens.json")
				require.NoError(t, os.WriteFile(path, raw.Bytes(), 0o600))
				cp, err := checkpoint.Open[string, tokenValue](ctx, path, checkpoint.WithLogger(log))
				require.NoError(t, err)
				s, err := migrate.New(migrate.Config[string, tokenValue]{Phase: p, Legacy: &migratetest.Explicit[string, tokenValue]{}, Checkpoint: cp, Logger: log, Strict: strict})
				require.NoError(t, err)
				rep, err := s.Restore(ctx)
				clean(what, append(rep.Errors, err)...)
				assert.NotContains(t, rep.String(), apiKey, what)
				require.NoError(t, s.Close())
			}
		}
	}
}
