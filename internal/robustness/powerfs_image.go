package robustness

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// What survives a power cut: the images of the file system that a cut at
// the current step may leave, one per choice of the names and data not yet
// made durable.

// Image is what a disk holds after a power cut: a tree of directories and
// files.
type Image struct {
	Dir     bool
	Perm    fs.FileMode
	Data    []byte
	Entries map[string]*Image
}

// Choices returns how many disk images Reorder can leave: the product,
// over every directory entry changed since its directory was last synced,
// of the number of values it took (its durable one included).
func (p *PowerFS) Choices() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 1
	for _, c := range p.pendingNames() {
		n *= len(c.vals)
		if n > 1<<30 {
			return 1 << 30
		}
	}
	return n
}

// pendingName is a directory entry with pending changes, and every value
// it took since it was last durable, the durable one first.
type pendingName struct {
	dir  *node
	name string
	vals []*node
}

// pendingNames lists the entries with pending changes in the order of their
// first change. The caller holds mu.
func (p *PowerFS) pendingNames() []*pendingName {
	type key struct {
		dir  *node
		name string
	}
	at := map[key]*pendingName{}
	var out []*pendingName
	for _, o := range p.log {
		k := key{o.dir, o.name}
		pn := at[k]
		if pn == nil {
			pn = &pendingName{dir: o.dir, name: o.name, vals: []*node{o.dir.durable[o.name]}}
			at[k] = pn
			out = append(out, pn)
		}
		pn.vals = append(pn.vals, o.target)
	}
	return out
}

// Image returns what the disk could hold after the cut under model s. For
// Reorder, choice (0 <= choice < Choices()) picks one combination of the
// values the pending entries took, and unsynced file data is torn in half.
// It may be called on a running PowerFS too, to see what a cut now would
// leave.
func (p *PowerFS) Image(s Survival, choice int) *Image {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Half: the ops up to the median sequence number survive.
	var upTo int
	switch s {
	case Keep:
		upTo = p.seq
	case Half:
		if len(p.log) > 0 {
			upTo = p.log[(len(p.log)-1)/2].seq
		}
	}
	pending := map[*node][]dirOp{}
	for _, o := range p.log {
		pending[o.dir] = append(pending[o.dir], o)
	}
	// Reorder: decode choice, mixed radix, into one value per entry.
	chosen := map[*node]map[string]*node{}
	if s == Reorder {
		for _, pn := range p.pendingNames() {
			if chosen[pn.dir] == nil {
				chosen[pn.dir] = map[string]*node{}
			}
			chosen[pn.dir][pn.name] = pn.vals[choice%len(pn.vals)]
			choice /= len(pn.vals)
		}
	}
	done := map[*node]*Image{}
	var build func(n *node) *Image
	build = func(n *node) *Image {
		if im, ok := done[n]; ok {
			return im // a hard link: the same file
		}
		im := &Image{Dir: n.dir, Perm: n.perm}
		done[n] = im
		if !n.dir {
			im.Data = survivingData(n, s)
			return im
		}
		ents := map[string]*node{}
		for name, c := range n.durable {
			ents[name] = c
		}
		switch s {
		case Keep, Half:
			for _, o := range pending[n] {
				if o.seq <= upTo {
					setEntry(ents, o)
				}
			}
		case Reorder:
			for name, c := range chosen[n] {
				setEntry(ents, dirOp{name: name, target: c})
			}
		}
		im.Entries = make(map[string]*Image, len(ents))
		for name, c := range ents {
			im.Entries[name] = build(c)
		}
		return im
	}
	return build(p.top)
}

func setEntry(ents map[string]*node, o dirOp) {
	if o.target == nil {
		delete(ents, o.name)
	} else {
		ents[o.name] = o.target
	}
}

// survivingData returns a file's bytes after a cut: the synced ones and,
// when the unsynced ones extend them, half of those in Half and Reorder.
func survivingData(n *node, s Survival) []byte {
	if s == Keep {
		return slices.Clone(n.data)
	}
	if s == Drop || len(n.data) <= len(n.synced) || !slices.Equal(n.data[:len(n.synced)], n.synced) {
		return slices.Clone(n.synced)
	}
	return slices.Clone(n.data[:len(n.synced)+(len(n.data)-len(n.synced))/2])
}

// Materialize writes the image below dir, a real directory, with the
// image's permissions (and no fsync: the test reads it back at once).
func (im *Image) Materialize(dir string) error {
	for name, c := range im.Entries {
		path := filepath.Join(dir, name)
		if c.Dir {
			if err := os.Mkdir(path, 0o700); err != nil {
				return err
			}
			if err := c.Materialize(path); err != nil {
				return err
			}
		} else if err := os.WriteFile(path, c.Data, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(path, c.Perm); err != nil {
			return err
		}
	}
	return nil
}

// Find returns the node at rel (a slash-separated path below the image's
// root), or nil.
func (im *Image) Find(rel string) *Image {
	cur := im
	for _, part := range strings.Split(filepath.Clean(rel), "/") {
		if part == "." || part == "" {
			continue
		}
		if cur == nil || !cur.Dir {
			return nil
		}
		cur = cur.Entries[part]
	}
	return cur
}
