package engine

import (
	"errors"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// Kept copies: files set aside beside a checkpoint, named by why they were
// kept, each with its journal, if it had one, under the same name +
// ".journal":
//
//	path.corrupt-<UTC time>         Quarantine: a file Load could not use
//	path.before-<verb>-<UTC time>   the phaseshift command's repair <verb>:
//	                                the file it replaced
//
// The time is "20060102T150405.000000000Z"; a name already taken gets
// "-<n>" after it. A copy with no file and only its journal is a journal
// that was set aside without the file it followed.
//
// Each kind is bounded: making a copy beyond KeptBound removes the oldest
// of its kind, so that a node that quarantines or repairs again and again
// does not fill its disk with copies nobody reads.
const (
	infixQuarantine = ".corrupt-"
	infixBefore     = ".before-"
	keptTimeLayout  = "20060102T150405.000000000Z"
	// KeptBound is how many copies of each kind (quarantined; kept by a
	// repair) a checkpoint keeps. The package documentation and the
	// README state it.
	KeptBound = 5
)

// keptStamp matches the end of a kept copy's name: its time, and the
// number a taken name adds.
var keptStamp = regexp.MustCompile(`-?(\d{8}T\d{6}\.\d{9}Z)(?:-(\d+))?$`)

// keptBase returns the name, without a collision number, of a new copy of
// path kept for kind (and, for a repair, by verb).
func keptBase(path string, kind rawfile.Why, verb string, now time.Time) string {
	stamp := now.UTC().Format(keptTimeLayout)
	if kind == rawfile.WhyQuarantine {
		return path + infixQuarantine + stamp
	}
	return path + infixBefore + verb + "-" + stamp
}

// keptCopy is a kept copy found beside a checkpoint.
type keptCopy struct {
	name    string // the copy's file; it may be missing when journal is not
	journal string // its journal, or ""
	hasFile bool
	kind    rawfile.Why
	verb    string // a repair's verb
	at      time.Time
	n       int // the collision number
}

// parseKept reads the name of a file beside the checkpoint whose base name
// is base: a kept copy's, or not (ok false). A journal's name reads as its
// copy's.
func parseKept(base, name string) (c keptCopy, ok bool) {
	rest := strings.TrimSuffix(name, ".journal")
	var kindPart string
	switch {
	case strings.HasPrefix(rest, base+infixQuarantine):
		c.kind, kindPart = rawfile.WhyQuarantine, strings.TrimPrefix(rest, base+infixQuarantine)
	case strings.HasPrefix(rest, base+infixBefore):
		c.kind, kindPart = rawfile.WhyRepair, strings.TrimPrefix(rest, base+infixBefore)
	default:
		return c, false
	}
	m := keptStamp.FindStringSubmatchIndex(kindPart)
	if m == nil {
		return c, false
	}
	t, err := time.Parse(keptTimeLayout, kindPart[m[2]:m[3]])
	if err != nil {
		return c, false
	}
	c.at, c.verb = t, kindPart[:m[0]]
	if (c.kind == rawfile.WhyQuarantine) != (c.verb == "") {
		return c, false
	}
	if m[4] >= 0 {
		c.n, _ = strconv.Atoi(kindPart[m[4]:m[5]])
	}
	c.name = rest
	return c, true
}

// listKept returns the kept copies of the checkpoint at path, oldest
// first.
func listKept(fsy fsys.FS, path string) ([]keptCopy, error) {
	dir, base := filepath.Split(path)
	names, err := fsy.ReadDirNames(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	byName := map[string]*keptCopy{}
	for _, n := range names {
		c, ok := parseKept(base, n)
		if !ok {
			continue
		}
		c.name = filepath.Join(dir, c.name)
		k := byName[c.name]
		if k == nil {
			k = &c
			byName[c.name] = k
		}
		if full := filepath.Join(dir, n); full != k.name {
			k.journal = full
		} else {
			k.hasFile = true
		}
	}
	out := make([]keptCopy, 0, len(byName))
	for _, k := range byName {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b keptCopy) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		if a.n != b.n {
			return a.n - b.n
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

// pruneKept removes the oldest copies of kind beyond KeptBound, each file
// before its journal (a crash between leaves a journal alone, which is
// never taken for a copy that can be restored), and returns the names of
// the copies it removed. It runs after the new copy is durable (and, for
// a repair, after the repair), and is best effort: a copy it cannot remove
// stays, and is logged. The removals need not be durable: a copy that
// comes back after a power cut is removed by the next prune.
func (d *disk) pruneKept(kind rawfile.Why) []string {
	copies, err := listKept(d.fs, d.path)
	if err != nil {
		d.log.Warn("cannot list the kept copies of the checkpoint to remove the oldest", zap.String("path", d.path), zap.Error(err))
		return nil
	}
	copies = slices.DeleteFunc(copies, func(c keptCopy) bool { return c.kind != kind })
	var removed []string
	for ; len(copies) > KeptBound; copies = copies[1:] {
		if err := d.removeKept(copies[0]); err != nil {
			d.log.Warn("cannot remove an old kept copy of the checkpoint", zap.String("path", copies[0].name), zap.Error(err))
			continue
		}
		removed = append(removed, copies[0].name)
		d.log.Info("removed the oldest kept copy of the checkpoint: a checkpoint keeps a bounded number of each kind",
			zap.String("path", copies[0].name), zap.String("kind", string(kind)), zap.Int("bound", KeptBound))
	}
	return removed
}

// removeKept removes a kept copy: its file, then its journal.
func (d *disk) removeKept(c keptCopy) error {
	for _, name := range []string{c.name, c.journal} {
		if name == "" {
			continue
		}
		if err := d.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Kept lists the copies kept beside path, oldest first, for the phaseshift
// command.
func Kept(path string) ([]rawfile.Copy, error) {
	copies, err := listKept(fsys.OS{}, filepath.Clean(path))
	if err != nil {
		return nil, err
	}
	out := make([]rawfile.Copy, 0, len(copies))
	for _, c := range copies {
		out = append(out, rawfile.Copy{Path: c.name, Journal: c.journal, HasFile: c.hasFile, Why: c.kind, Verb: c.verb, At: c.at})
	}
	return out, nil
}
