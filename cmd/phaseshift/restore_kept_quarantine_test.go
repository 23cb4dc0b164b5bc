package main_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// TestRestoreKeptOfAQuarantinedCopyIsBehind is issue 41's path 3 with the
// real command. A build of schema 2 commits in phase 2 over CRI; a
// rollback to the build before it (schema 1) quarantines the newer file
// and saves; commits follow: pod-1 is deleted and its address given to
// pod-9. `phaseshift restore-kept --replace-intact` of the quarantined
// copy puts back a file that lacks those commits: it must be marked
// behind, and phase 3 must refuse it (migrate.ErrStale) rather than serve
// pod-1 and backfill pod-9 from CRI, one address twice. On the code before
// the fix the save after the quarantine wrote seq 1, so the copy's higher
// seq made it look current, and phase 3 served both.
func TestRestoreKeptOfAQuarantinedCopyIsBehind(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	cri := &migratetest.Implicit[key, value]{}
	pod := func(i int, ip string) (key, value) {
		return k(i), value{IP: ip, Token: secret + ip}
	}
	start := func(p migrate.Phase, opts []checkpoint.Option) (*migrate.Store[key, value], migrate.Report[key], error) {
		t.Helper()
		cp, err := checkpoint.Open[key, value](ctx, path, opts...)
		require.NoError(t, err)
		s, err := migrate.New(migrate.Config[key, value]{Phase: p, Legacy: cri, Checkpoint: cp,
			Equal:  func(a, b value) bool { return a.IP == b.IP },
			Unique: func(v value) []string { return []string{v.IP} }})
		require.NoError(t, err)
		rep, err := s.Restore(ctx)
		return s, rep, err
	}
	add := func(s *migrate.Store[key, value], i int, ip string) {
		kk, vv := pod(i, ip)
		require.NoError(t, s.Put(ctx, kk, vv))
		cri.Set(kk, vv) // the sandbox is listed once its ADD returned
	}
	newer, older := checkpointtest.Schema(2), []checkpoint.Option{checkpoint.WithSchema(1)}

	// The newer build: pods 1-3, then a few more commits, so that the
	// file's seq is well above 1.
	s, _, err := start(migrate.PhaseMigrate, newer)
	require.NoError(t, err)
	add(s, 1, "10.0.0.1")
	add(s, 2, "10.0.0.2")
	add(s, 3, "10.0.0.3")
	for range 5 {
		add(s, 3, "10.0.0.3") // a re-ADD of the same sandbox: one more commit
	}
	require.NoError(t, s.Close())
	keptSeq := mustLoad(t, path).Meta.Seq

	// The rollback: the older build cannot read schema 2, quarantines
	// the file and restores from CRI. Then pod-1 goes and pod-9 gets its
	// address.
	s, rep, err := start(migrate.PhaseMigrate, older)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Quarantined, "the older build quarantines the newer file: %s", rep)
	quarantined := rep.Quarantined
	kk, _ := pod(1, "")
	require.NoError(t, s.Delete(ctx, kk))
	cri.Remove(kk)
	add(s, 9, "10.0.0.1")
	want := served(s)
	require.NoError(t, s.Close())
	after := mustLoad(t, path)
	assert.Greater(t, after.Meta.Seq, keptSeq, "the saves after the quarantine go on from its seq")

	// The operator puts the quarantined copy back, as restore-kept's
	// --help says: --replace-intact over an intact file, --accept-loss
	// since the copy lacks pod-9.
	r := run(t, "restore-kept", "--replace-intact", path, quarantined)
	require.Equal(t, 9, r.code, "the copy lacks pod-9: refused without --accept-loss: %s", r.stderr)
	r = run(t, "restore-kept", "--replace-intact", "--accept-loss", path, quarantined)
	require.Equal(t, 0, r.code, r.stderr)
	restored := mustLoad(t, path)
	assert.NotEmpty(t, restored.Meta.Behind, "the copy lacks the commits after the quarantine: it is marked behind")
	var out struct{ Header struct{ Behind string } }
	r = run(t, "inspect", "--json", path)
	decodeJSON(t, r.stdout, &out)
	assert.NotEmpty(t, out.Header.Behind, "inspect shows the mark: %s", r.stdout)

	// Phase 3 (the newer build again) must refuse the file, not serve
	// pod-1 beside pod-9 on one address.
	s, rep, err = start(migrate.PhaseContract, newer)
	if err == nil {
		t.Errorf("phase 3 served a copy that lacks acknowledged commits: %s; serves %d entries", rep, s.Len())
	} else {
		assert.True(t, errors.Is(err, migrate.ErrStale), "phase 3 refuses with ErrStale: %v", err)
		assert.Zero(t, s.Len())
	}
	require.NoError(t, s.Close())

	// Phase 2 rebuilds from CRI, which is current. pod-1 only the copy
	// holds and pod-9 only CRI lists share 10.0.0.1: the sides cannot
	// tell which holds it, so (issue 41's rule 3) both are served, pod-1
	// as an orphan, the conflict is reported and the address stays taken.
	kk1, _ := pod(1, "10.0.0.1")
	kk9, _ := pod(9, "10.0.0.1")
	s, rep, err = start(migrate.PhaseMigrate, newer)
	require.NoError(t, err)
	assert.Equal(t, withEntry(want, kk1, value{IP: "10.0.0.1", Token: secret + "10.0.0.1"}), served(s))
	assert.Contains(t, rep.Orphaned, kk1, "%s", rep)
	assert.True(t, slices.ContainsFunc(rep.Errors, func(e error) bool { return errors.Is(e, migrate.ErrValueShared) }),
		"the shared address is reported: %s", rep)
	require.NoError(t, s.Close())

	// At the next restore pod-9 is listed and held, so pod-1, which
	// shares its address, is dropped; then phase 3 serves exactly what
	// the node holds.
	s, rep, err = start(migrate.PhaseMigrate, newer)
	require.NoError(t, err)
	assert.Equal(t, want, served(s))
	assert.Contains(t, rep.Dropped, kk1, "%s", rep)
	assert.NotContains(t, rep.Dropped, kk9, "%s", rep)
	require.NoError(t, s.Close())
	s, _, err = start(migrate.PhaseContract, newer)
	require.NoError(t, err)
	assert.Equal(t, want, served(s))
	require.NoError(t, s.Close())
}

// withEntry is m with k set to v, m unchanged.
func withEntry(m map[key]value, k key, v value) map[key]value {
	c := maps.Clone(m)
	c[k] = v
	return c
}
