package vpccni

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"

	"github.com/phaseshift/phaseshift/source"
)

// Legacy is ipamd's own checkpoint file (ipam.json), read and written by
// the VPC CNI's datastore.JSONFile exactly as the released ipamd does, as
// an explicit legacy: a source.Reader, and a source.BatchWriter, so that
// the Store rewrites the file once per commit, as ipamd does once per
// change. The released binary reads what it writes, whatever phase wrote
// it.
//
// The methods are safe for concurrent use. Legacy keeps the file's
// allocations as it last read or wrote them, and applies each write to a
// copy of them: the file is written whole, by JSONFile (a temporary file,
// fsync, rename), so a write that fails leaves it as it was.
type Legacy struct {
	file *datastore.JSONFile

	mu      sync.Mutex                  // guards cached and loaded
	cached  map[Key]Alloc               // the file's allocations, as last read or written
	loaded  bool                        // cached holds the file
	path    string                      // for errors
	scratch []datastore.CheckpointEntry // reused by every write; guarded by mu
}

var (
	_ source.Reader[Key, Alloc]      = (*Legacy)(nil)
	_ source.Writer[Key, Alloc]      = (*Legacy)(nil)
	_ source.BatchWriter[Key, Alloc] = (*Legacy)(nil)
)

// NewLegacy returns the legacy side over ipamd's checkpoint at path.
func NewLegacy(path string) *Legacy {
	return &Legacy{file: datastore.NewJSONFile(path), path: path}
}

// List reads the file, as ipamd's ReadBackingStore does: a missing file
// holds nothing (a new node), one of another format version fails. An
// allocation whose key an earlier one of the file already has is not
// listed, and reported (a *source.ListError).
func (l *Legacy) List(context.Context) (map[Key]Alloc, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, err := l.read()
	if m != nil {
		l.cached, l.loaded = m, true
	}
	if m == nil {
		return nil, err
	}
	return maps.Clone(m), err
}

// read reads the file; the map is nil when it could not be read at all.
func (l *Legacy) read() (map[Key]Alloc, error) {
	var data datastore.CheckpointData
	if err := l.file.Restore(&data); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return map[Key]Alloc{}, nil
		}
		return nil, fmt.Errorf("vpccni: reading %s: %w", l.path, err)
	}
	if data.Version != datastore.CheckpointFormatVersion {
		return nil, fmt.Errorf("vpccni: %s has format %q, not %q: it was not written by ipamd", l.path, data.Version, datastore.CheckpointFormatVersion)
	}
	m := make(map[Key]Alloc, len(data.Allocations))
	var errs []error
	for _, a := range data.Allocations {
		if _, dup := m[a.IPAMKey]; dup {
			errs = append(errs, fmt.Errorf("vpccni: %s: allocation %v appears twice; the first is listed", l.path, a.IPAMKey))
			continue
		}
		m[a.IPAMKey] = allocOf(a)
	}
	if len(errs) > 0 {
		return m, &source.ListError{Errs: errs}
	}
	return m, nil
}

// LegacyKind is source.Durable: ipamd's file survives a restart.
func (l *Legacy) LegacyKind() source.Kind { return source.Durable }

// Put stores one allocation: the whole file is written again.
func (l *Legacy) Put(ctx context.Context, key Key, value Alloc) error {
	return l.Write(ctx, []source.Change[Key, Alloc]{{Key: key, Value: value}})
}

// Delete removes one allocation: the whole file is written again.
func (l *Legacy) Delete(ctx context.Context, key Key) error {
	return l.Write(ctx, []source.Change[Key, Alloc]{{Key: key, Delete: true}})
}

// Write applies changes in order and writes the file once, as ipamd
// would: all of them or, when it fails, none. The file lists allocations
// in no particular order, as ipamd's own does.
func (l *Legacy) Write(_ context.Context, changes []source.Change[Key, Alloc]) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.loaded {
		m, err := l.read()
		if m == nil {
			return err
		}
		l.cached, l.loaded = m, true
	}
	// Apply to the cache, remembering what each change replaced, so that a
	// failed write takes them back without a copy of every allocation.
	type was struct {
		key Key
		val Alloc
		had bool
	}
	undo := make([]was, 0, len(changes))
	for _, c := range changes {
		v, had := l.cached[c.Key]
		undo = append(undo, was{c.Key, v, had})
		if c.Delete {
			delete(l.cached, c.Key)
		} else {
			l.cached[c.Key] = c.Value
		}
	}
	l.scratch = l.scratch[:0]
	for k, a := range l.cached {
		l.scratch = append(l.scratch, entryOf(k, a))
	}
	data := datastore.CheckpointData{Version: datastore.CheckpointFormatVersion, Allocations: l.scratch}
	if err := l.file.Checkpoint(&data); err != nil {
		for i := len(undo) - 1; i >= 0; i-- {
			if u := undo[i]; u.had {
				l.cached[u.key] = u.val
			} else {
				delete(l.cached, u.key)
			}
		}
		return fmt.Errorf("vpccni: writing %s: %w", l.path, err)
	}
	return nil
}

func compareKeys(a, b Key) int {
	if c := strings.Compare(a.ContainerID, b.ContainerID); c != 0 {
		return c
	}
	if c := strings.Compare(a.IfName, b.IfName); c != 0 {
		return c
	}
	return strings.Compare(a.NetworkName, b.NetworkName)
}
