package migrate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
)

// TestRestoreReportsATornJournalRecord: a Store whose checkpoint keeps a
// journal restores, after a crash that tore the journal's last record,
// exactly the acknowledged writes, and says what was discarded in
// Report.Errors (a *checkpoint.TornJournalError), in every phase that
// reads the checkpoint and with Strict too: a commit that was never
// acknowledged is not state that could not be read.
//
// Shown to fail: without the JournalReporter check in readCheckpoint
// (migrate/read.go), "the torn record is reported" fails.
func TestRestoreReportsATornJournalRecord(t *testing.T) {
	t.Run("rule4", func(t *testing.T) {
		ctx := context.Background()
		for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
			for _, strict := range []bool{false, true} {
				t.Run(p.String()+map[bool]string{true: "/strict", false: ""}[strict], func(t *testing.T) {
					w := newWorld(true, nil)
					w.cp = checkpointtest.NewMemory[string, int](t, checkpoint.WithJournal())
					cfg := migrate.Config[string, int]{Phase: p, Legacy: w.exp, Checkpoint: w.cp, Strict: strict}
					s, err := migrate.New(cfg)
					require.NoError(t, err)
					_, err = s.Restore(ctx)
					require.NoError(t, err)
					require.NoError(t, s.Put(ctx, "a", 1))
					require.NoError(t, s.Put(ctx, "b", 2))
					require.NoError(t, s.Put(ctx, "c", 3))
					require.NotEmpty(t, checkpointtest.Journal(w.cp), "the writes went to the journal")
					// The crash: the last record's end never reached the disk.
					j := checkpointtest.Journal(w.cp)
					checkpointtest.SetJournal(w.cp, j[:len(j)-10])
					if p.WritesLegacy() {
						// The in-flight write had not reached legacy either.
						require.NoError(t, w.exp.Delete(ctx, "c"))
					}

					cfg.Checkpoint = checkpointtest.Reopen(t, w.cp)
					s2, err := migrate.New(cfg)
					require.NoError(t, err)
					defer s2.Close()
					rep, err := s2.Restore(ctx)
					require.NoError(t, err, "a torn record stops nothing")
					assert.Equal(t, map[string]int{"a": 1, "b": 2}, collectStore(s2))
					found := false
					for _, e := range rep.Errors {
						var torn *checkpoint.TornJournalError
						found = found || (errors.As(e, &torn) && errors.Is(e, checkpoint.ErrTornJournal))
					}
					assert.True(t, found, "the torn record is reported: %v", rep.Errors)
					assert.Empty(t, rep.Quarantined, "nothing is moved aside")
					require.NoError(t, s2.Put(ctx, "d", 4))
					s3, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: w.exp, Checkpoint: checkpointtest.Reopen(t, w.cp)})
					require.NoError(t, err)
					defer s3.Close()
					rep, err = s3.Restore(ctx)
					require.NoError(t, err)
					assert.Empty(t, rep.Errors, "the next write folded the torn record away")
					assert.Equal(t, map[string]int{"a": 1, "b": 2, "d": 4}, collectStore(s3))
				})
			}
		}
	})
}

func collectStore(s *migrate.Store[string, int]) map[string]int {
	m := map[string]int{}
	for k, v := range s.All() {
		m[k] = v
	}
	return m
}
