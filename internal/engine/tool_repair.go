package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"time"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// The repairs the phaseshift command makes under the lock: LockRaw opens a
// checkpoint of any types for them, and rawLocked deletes an entry,
// discards, keeps a copy of, or replaces the file with the same write
// protocol as File (see tool.go for the reads).

// rawLocked is a checkpoint of raw types opened under its lock.
type rawLocked struct {
	f *File[rawfile.Key, json.RawMessage]
	p *primed
}

func LockRaw(ctx context.Context, path string, wait time.Duration) (rawfile.Locked, error) {
	// WithoutJournal: a repair writes the whole file, folding the journal
	// into it (delete), whatever the daemon that owns the file does.
	f, err := Open[rawfile.Key, json.RawMessage](ctx, path, WithLockWait(wait), WithoutJournal())
	if err != nil {
		return nil, err
	}
	p := &primed{backend: f.c.be}
	f.c.be = p
	return &rawLocked{f: f, p: p}, nil
}

func (l *rawLocked) Read(ctx context.Context, opt rawfile.Options) *rawfile.File {
	return loadRaw(ctx, l.f.c, l.p, opt)
}

func (l *rawLocked) Delete(ctx context.Context, h rawfile.Header, key rawfile.Key) error {
	return l.f.Commit(ctx, Meta(h), []Change[rawfile.Key, json.RawMessage]{{Key: key, Delete: true}})
}

func (l *rawLocked) Close() error { return l.f.Close() }

func (l *rawLocked) Discard(ctx context.Context) error {
	c, d := l.f.c, l.f.disk
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return err
	}
	if err := d.own("discard", nil); err != nil {
		return err
	}
	if err := d.fs.Remove(d.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathError("discard", d.path, err)
	}
	if err := d.removeJournal(); err != nil {
		return err
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return pathError("discard: fsync directory", d.dir, err)
	}
	// The core's view of the file is stale now; the next use reads it.
	c.state, c.bad, c.last = stateUnknown, nil, onDisk{}
	c.ents = newEntries[rawfile.Key](0)
	return nil
}

func (l *rawLocked) KeepCopy(ctx context.Context, verb string) (string, error) {
	c := l.f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return "", err
	}
	return l.f.disk.keepCopy(verb)
}

func (l *rawLocked) PruneKept(ctx context.Context) ([]string, error) {
	c := l.f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return l.f.disk.pruneKept(rawfile.WhyRepair), nil
}

func (l *rawLocked) Replace(ctx context.Context, h rawfile.Header, entries []rawfile.Entry, seqAbove uint64) error {
	c := l.f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return err
	}
	lines := make([][]byte, 0, len(entries))
	for i, e := range entries {
		line, err := encodeEntry(c.enc, &c.keys, nil, e.Key, e.Value, i)
		if err != nil {
			return pathError("save", c.be.name(), err)
		}
		lines = append(lines, line)
	}
	m := Meta(h)
	// Format 1: a repaired file has no journal of its own (the journal
	// is removed below). Its Seq is above the file's, which every record
	// of the journal names as its base, so that even a journal a crash
	// brings back is skipped as older, if it is intact.
	m.Format = 1
	m.Schema = max(h.Schema, 1)
	m.Seq = max(c.last.seq, c.head, seqAbove) + 1
	m.SavedAt = time.Now().UTC()
	if err := l.f.disk.writeOver(appendFile(nil, m, lines)); err != nil {
		return err
	}
	// Then the journal goes (KeepCopy kept it): its records are in entries
	// or were meant to go, and a damaged one would make the repaired
	// checkpoint unreadable again. Only now, with the new file durable: a
	// crash before leaves the new file and a journal whose records, if
	// intact, are skipped as older.
	if err := l.f.disk.removeJournal(); err != nil {
		return err
	}
	if err := l.f.disk.fs.SyncDir(l.f.disk.dir); err != nil {
		return pathError("save: fsync directory", l.f.disk.dir, err)
	}
	// The core's view of the file is stale now; the next use reads it.
	c.state, c.bad, c.last = stateUnknown, nil, onDisk{exists: true, seq: m.Seq, savedAt: m.SavedAt}
	c.ents = newEntries[rawfile.Key](0)
	return nil
}

// keepCopy links the checkpoint, and its journal if there is one, to a
// new name that says which repair (verb) kept them, path.before-<verb>-<UTC
// time> (the journal's: the same name + ".journal"), as quarantine does,
// but leaves them in place: a repair replaces the file afterwards with an
// atomic rename, so there is no instant without a checkpoint at the path.
// A journal without its file is kept alone, and its name returned, as
// quarantine does. The oldest copies beyond the bound are removed later,
// by PruneKept, once the repair is done: a repair that fails leaves every
// copy there was.
func (d *disk) keepCopy(verb string) (string, error) {
	if err := d.own("keep a copy", nil); err != nil {
		return "", err
	}
	base := keptBase(d.path, rawfile.WhyRepair, verb, time.Now())
	dst, hasFile, err := d.linkAside(d.path, base, "")
	if err != nil {
		return "", err
	}
	if !hasFile {
		dst = base
	}
	// The journal, if any, is kept with it, under the same name +
	// ".journal": the repair that follows makes its records stale.
	jdst, hasJournal, err := d.linkAside(d.journal, dst, ".journal")
	if err != nil {
		return "", err
	}
	switch {
	case !hasFile && !hasJournal:
		return "", pathError("keep a copy", d.path, ErrNotExist)
	case !hasFile:
		dst = jdst
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return "", pathError("keep a copy: fsync directory", d.dir, err)
	}
	return dst, nil
}

// writeOver makes data the checkpoint with the steps of replace (temporary
// file, write, fsync, close, rename, fsync of the directory) but without
// keeping the file it replaces as .prev: the repairs that use it replace a
// file that did not load, which .prev must never hold, and have kept it
// first (KeepCopy, as PATH.before-<verb>-<time>). If the directory fsync
// fails, the new file is left in place (the old one is in the kept copy)
// and the error says so.
func (d *disk) writeOver(data []byte) error {
	fail := func(step string, err error) error { return pathError("save: "+step, d.path, err) }
	if err := d.own("save", nil); err != nil {
		return err
	}
	tmp, step, err := d.writeTemp(data)
	if err != nil {
		return fail(step, err)
	}
	if err := d.fs.Rename(tmp, d.path); err != nil {
		_ = d.fs.Remove(tmp)
		return fail("rename", err)
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return fail("fsync directory (the new file is in place but may not survive a power cut; run sync)", err)
	}
	return nil
}
