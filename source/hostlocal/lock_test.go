package hostlocal_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// tryLock takes and drops flock(LOCK_EX|LOCK_NB) on path, as another
// process would.
func tryLock(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// While a host-local process (the plugins' own store, in another process)
// holds its lock, no operation of a Source touches the files: each waits
// for the lock until its context is done, then fails with ErrLocked. When
// host-local dies, even by SIGKILL, the lock is free.
func TestHostLocalsLockExcludesSource(t *testing.T) {
	s := openSource(t)
	old := startChild(t, "hold", envDataDir, filepath.Dir(s.Dir()))
	expectLine(t, old, "locked")

	err := s.Lock(shortCtx(t))
	require.ErrorIs(t, err, hostlocal.ErrLocked)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), filepath.Join(s.Dir(), "lock"))
	_, err = s.List(shortCtx(t))
	assert.ErrorIs(t, err, hostlocal.ErrLocked)
	assert.ErrorIs(t, s.Put(shortCtx(t), key("c", "eth0"), alloc("10.0.0.2")), hostlocal.ErrLocked)
	assert.ErrorIs(t, s.Delete(shortCtx(t), key("c", "eth0")), hostlocal.ErrLocked)
	_, err = s.LastReserved(shortCtx(t), 0)
	assert.ErrorIs(t, err, hostlocal.ErrLocked)
	assert.Empty(t, dirFiles(t, s.Dir()), "nothing was written while host-local held its lock")

	old.kill()
	require.NoError(t, s.Lock(longCtx(t)))
	require.NoError(t, s.Put(longCtx(t), key("c", "eth0"), alloc("10.0.0.2")))
}

// Lock holds host-local's lock across operations until Unlock: a
// host-local process waiting for it gets it only then.
func TestLockHoldsAcrossOperations(t *testing.T) {
	ctx := longCtx(t)
	s := openSource(t)
	require.NoError(t, s.Lock(ctx))
	require.NoError(t, s.Lock(ctx), "Lock while holding it is a no-op")

	old := startChild(t, "wait", envDataDir, filepath.Dir(s.Dir()))
	expectLine(t, old, "waiting")
	require.NoError(t, s.Put(ctx, key("a", "eth0"), alloc("10.0.0.2")))
	_, err := s.List(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, key("a", "eth0")))
	time.Sleep(100 * time.Millisecond) // give host-local a chance to get in, wrongly
	select {
	case line := <-old.lines:
		t.Fatalf("host-local printed %q while the Source held the lock", line)
	default:
	}
	assert.Error(t, tryLock(filepath.Join(s.Dir(), "lock")), "the lock is held between operations")

	require.NoError(t, s.Unlock())
	expectLine(t, old, "acquired")
	require.NoError(t, old.wait())
	require.NoError(t, s.Unlock(), "Unlock without the lock is a no-op")
}

// The order the package documentation gives, with real processes: old
// host-local binaries (its lock only) and execs of a plugin in phases 0, 1
// and 2 (the checkpoint's lock, then host-local's, held from before
// Restore to after the write), all at once on one network. Every exec
// finishes (no deadlock), every ADD succeeds (no exec allocates from a
// state another changed under it), and every acknowledged address is in
// host-local's files under its container.
func TestLockOrderWithOldBinaryAndEveryPhase(t *testing.T) {
	dataDir := t.TempDir()
	ckpt := filepath.Join(t.TempDir(), "hostlocal.json")
	const perRole = 5
	roles := []struct{ role, phase string }{{"old-add", ""}, {"exec", "legacy"}, {"exec", "expand"}, {"exec", "migrate"}}
	type run struct {
		id string
		c  *childProc
	}
	var runs []run
	for i := range perRole {
		for _, r := range roles {
			id := fmt.Sprintf("%s-%s-%d", r.role, r.phase, i)
			c := startChild(t, r.role, envDataDir, dataDir, envCkpt, ckpt, envPhase, r.phase, envID, id)
			runs = append(runs, run{id, c})
		}
	}
	acked := map[hostlocal.Key]hostlocal.Allocation{}
	for _, r := range runs {
		var out []string
		for line := range r.c.lines {
			out = append(out, line)
		}
		require.NoError(t, r.c.wait(), "%s", r.id)
		require.Len(t, out, 1, "%s", r.id)
		acked[key(r.id, "eth0")] = alloc(out[0])
	}
	s := openSourceIn(t, dataDir)
	assert.Equal(t, acked, list(t, s))

	// What the last phase 1 or 2 exec saved is a subset of the files.
	cp, err := checkpoint.Open[hostlocal.Key, hostlocal.Allocation](longCtx(t), ckpt)
	require.NoError(t, err)
	defer cp.Close()
	snap, err := cp.Load(longCtx(t))
	require.NoError(t, err)
	assert.NotEmpty(t, snap.Entries)
	for k, v := range snap.Entries {
		assert.Equal(t, acked[k], v, "%s", k)
	}
}

// In one process, Sources of one network exclude each other like
// processes: concurrent allocations, each under Lock, never collide.
func TestConcurrentSources(t *testing.T) {
	dataDir := t.TempDir()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- allocate(dataDir, fmt.Sprintf("c%d", i))
		}()
	}
	// Meanwhile, one shared Source writes, deletes and lists from several
	// goroutines (for the race detector), on addresses of its own.
	shared := openSourceIn(t, dataDir)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			k := key(fmt.Sprintf("shared%d", g), "eth0")
			for j := range 10 {
				ip := netip.AddrFrom4([4]byte{10, 8, byte(g), byte(j + 1)})
				assert.NoError(t, shared.Put(ctx, k, hostlocal.NewAllocation(ip)))
				_, err := shared.List(ctx)
				assert.NoError(t, err)
			}
			assert.NoError(t, shared.Delete(ctx, k))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := list(t, shared)
	assert.Len(t, got, n)
	seen := map[netip.Addr]bool{}
	for _, a := range got {
		require.Len(t, a.IPs, 1)
		assert.False(t, seen[a.IPs[0]], "%s given twice", a.IPs[0])
		seen[a.IPs[0]] = true
	}
}

// allocate gives container id the lowest free address of 10.9.0.0/24, as
// one exec would: Lock, List, Put, Close.
func allocate(dataDir, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := hostlocal.Open(dataDir, network)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Lock(ctx); err != nil {
		return err
	}
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	used := map[netip.Addr]bool{}
	for _, a := range all {
		for _, ip := range a.IPs {
			used[ip] = true
		}
	}
	ip := netip.MustParseAddr("10.9.0.2")
	for used[ip] {
		ip = ip.Next()
	}
	return s.Put(ctx, key(id, "eth0"), hostlocal.NewAllocation(ip))
}
