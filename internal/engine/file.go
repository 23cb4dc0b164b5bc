package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// File is checkpoint.File: see its documentation there.
type File[K comparable, V any] struct {
	c    *core[K, V]
	disk *disk
}

// Open is checkpoint.Open: see its documentation there.
func Open[K comparable, V any](ctx context.Context, path string, opts ...Option) (*File[K, V], error) {
	cfg, err := configure[K, V](opts)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("checkpoint: %w: the path is empty: give the file to keep the checkpoint in, e.g. /var/run/mydaemon/state.json", ErrInvalidOption)
	}
	path = filepath.Clean(path)
	var bootID string
	if cfg.bootID != nil {
		if bootID, err = cfg.bootID(); err != nil {
			return nil, fmt.Errorf("checkpoint %s: boot ID: %w", path, err)
		}
	}
	if cfg.fs == nil {
		cfg.fs = fsys.OS{}
	}
	d := &disk{
		fs:      cfg.fs,
		path:    path,
		dir:     filepath.Dir(path),
		prev:    path + ".prev",
		prevTmp: filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".prev-tmp"),
		lock:    path + ".lock",
		journal: path + ".journal",
		appends: cfg.journal,
		mode:    cfg.mode,
		log:     cfg.logger,
	}
	if err := d.makeDir(); err != nil {
		return nil, pathError("open: directory", d.dir, err)
	}
	if _, real := cfg.fs.(fsys.OS); real {
		if above := fsys.WritableAbove(d.dir); above != "" {
			cfg.logger.Warn("a directory above the checkpoint's may be written by other users, who could move the checkpoint's directory away and put another in its place: chmod go-w it, or keep the checkpoint elsewhere",
				zap.String("path", path), zap.String("directory", above))
		}
	}
	if err := d.acquire(ctx, cfg.lockWait); err != nil {
		return nil, err
	}
	if n, err := d.removeLeftovers(); err != nil {
		d.release()
		return nil, pathError("open: remove leftover temporary files", d.dir, err)
	} else if n > 0 {
		cfg.logger.Info("removed temporary files left by an interrupted save", zap.String("path", path), zap.Int("count", n))
	}
	return &File[K, V]{c: newCore[K, V](cfg, d, bootID), disk: d}, nil
}

// Path is checkpoint.File.Path: see its documentation there.
func (f *File[K, V]) Path() string { return f.disk.path }

// BootID is checkpoint.File.BootID: see its documentation there.
func (f *File[K, V]) BootID() string { return f.c.bootID }

// Size is checkpoint.File.Size: see its documentation there.
func (f *File[K, V]) Size() int64 { return f.c.size.Load() }

// Journal is checkpoint.File.Journal: see its documentation there.
func (f *File[K, V]) Journal() JournalStatus { return f.c.journal() }

// Load is checkpoint.File.Load: see its documentation there.
func (f *File[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return f.c.load(ctx)
}

// Save is checkpoint.File.Save: see its documentation there.
func (f *File[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return f.c.save(ctx, s)
}

// Commit is checkpoint.File.Commit: see its documentation there.
func (f *File[K, V]) Commit(ctx context.Context, m Meta, changes []Change[K, V]) error {
	return f.c.commit(ctx, m, changes)
}

// CommitEncoded is checkpoint.File.CommitEncoded: see its documentation there.
func (f *File[K, V]) CommitEncoded(ctx context.Context, m Meta, changes []EncodedChange[K, V]) error {
	return f.c.commitEncoded(ctx, m, changes)
}

// Quarantine is checkpoint.File.Quarantine: see its documentation there.
func (f *File[K, V]) Quarantine(ctx context.Context) (string, error) {
	return f.c.quarantine(ctx)
}

// Close is checkpoint.File.Close: see its documentation there.
func (f *File[K, V]) Close() error {
	return f.c.close()
}
