package hostlocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"

	"github.com/phaseshift/phaseshift/source"
)

// DefaultDataDir is where host-local keeps its networks when the network
// configuration sets no dataDir.
const DefaultDataDir = "/var/lib/cni/networks"

// Key names one allocation as the CNI specification does: the network, the
// container, and the interface inside the container. It round-trips
// through encoding/json exactly: every key List returns and every key Put
// accepts is valid UTF-8 (see Put for the rest of what a key must be).
//
// IfName is empty for a file written by host-local before plugins v0.8.0,
// which recorded only the container ID; see the package documentation.
type Key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// String returns network/containerID/ifName, for logs and errors.
func (k Key) String() string { return k.Network + "/" + k.ContainerID + "/" + k.IfName }

// Allocation is what host-local's files hold for a key: its addresses, one
// file each. host-local allocates one address per range set of the network
// configuration, so a dual-stack network gives a key two.
//
// List returns IPs in ascending order (netip.Addr.Compare: IPv4 before
// IPv6), without duplicates, and Put accepts only that form, so that a
// value a Store holds compares equal to what List gives back; build one
// with [NewAllocation]. It round-trips through encoding/json exactly.
type Allocation struct {
	IPs []netip.Addr `json:"ips"`
}

// NewAllocation returns an Allocation of ips in the form Put accepts:
// sorted, without duplicates. It does not check the addresses; Put does.
func NewAllocation(ips ...netip.Addr) Allocation {
	s := slices.Clone(ips)
	slices.SortFunc(s, netip.Addr.Compare)
	return Allocation{IPs: slices.Compact(s)}
}

// Option configures Open.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	rangeIndex    func(netip.Addr) (int, bool)
	rangeIndexSet bool
}

// WithRangeIndex tells Put which range set of the network configuration an
// address comes from: its index in the configuration's "ranges", which is
// how host-local names its last_reserved_ip.<index> files. With it, Put
// reserves each new address the way host-local's own allocation does,
// recording it as the last one reserved in its range set, so that the next
// allocation, by host-local or by the plugin, continues round-robin after
// it. An address for which index reports false, and every address without
// this option, is reserved without touching last_reserved_ip.
//
// A nil index is an error at Open (ErrInvalid).
func WithRangeIndex(index func(netip.Addr) (int, bool)) Option {
	return optionFunc(func(c *config) { c.rangeIndex, c.rangeIndexSet = index, true })
}

// Source is host-local's on-disk store for one network, as a legacy
// source.Reader and source.Writer of [Key] and [Allocation].
//
// All methods are safe for concurrent use. They run one at a time, each
// holding host-local's directory lock for its duration unless [Source.Lock]
// holds it already.
type Source struct {
	network string
	dir     string
	store   *disk.Store // the plugins' own store, through which Put reserves
	cfg     config

	mu     sync.Mutex // guards held, index and closed; held by every operation, which makes them run one at a time
	held   *os.File   // the open file holding host-local's lock after Lock; nil when not held
	closed bool
	// index is what the last read of the directory under Lock found, kept
	// current by this Source's own writes. While the lock is held no
	// host-local and no other Source changes the files, so a Put after
	// Restore's List need not read a thousand files again. nil when Lock
	// does not hold the lock, and after a write that failed.
	index map[netip.Addr]file
}

var (
	_ source.Reader[Key, Allocation] = (*Source)(nil)
	_ source.Writer[Key, Allocation] = (*Source)(nil)
)

// Open returns the Source of network under dataDir (DefaultDataDir if
// empty), creating the network's directory as host-local does if it is
// missing. It takes no lock; see Source.Lock.
func Open(dataDir, network string, opts ...Option) (*Source, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.rangeIndexSet && cfg.rangeIndex == nil {
		return nil, fmt.Errorf("hostlocal: %w: WithRangeIndex(nil): pass the function that maps an address to its range set, or leave the option out", ErrInvalid)
	}
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	// disk.New creates <dataDir>/<network> (0755) and opens its lock file,
	// as every host-local exec does.
	st, err := disk.New(network, dataDir)
	if err != nil {
		return nil, fmt.Errorf("hostlocal: open %s: %w", filepath.Join(dataDir, network), err)
	}
	return &Source{network: network, dir: filepath.Join(dataDir, network), store: st, cfg: cfg}, nil
}

// Network returns the network's name, the Network of every key.
func (s *Source) Network() string { return s.network }

// Dir returns the network's directory, <dataDir>/<network>.
func (s *Source) Dir() string { return s.dir }

// Lock takes host-local's lock on the network directory (flock(2) on its
// file "lock", as the plugins' backend/disk FileLock does), waiting until
// ctx is done and then failing with ErrLocked. Until Unlock or Close, every
// operation of s runs under it, and no host-local binary and no other
// Source can change the network's files. Lock while s holds the lock is a
// no-op; one Unlock releases it. See the package documentation for the
// order to take it in with a checkpoint's lock.
func (s *Source) Lock(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("hostlocal: lock %s: %w", s.dir, ErrClosed)
	}
	if s.held != nil {
		return nil
	}
	f, err := acquire(ctx, s.lockPath())
	if err != nil {
		return err
	}
	s.held = f
	return nil
}

// Unlock releases the lock Lock took. It is a no-op if s does not hold it.
func (s *Source) Unlock() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release()
}

// Close releases the lock if s holds it and closes s. It is idempotent:
// later calls return nil. Other methods return ErrClosed afterwards.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return errors.Join(s.release(), s.store.Close())
}

func (s *Source) release() error {
	if s.held == nil {
		return nil
	}
	err := s.held.Close() // closing the only descriptor of the lock's open file drops the flock
	s.held, s.index = nil, nil
	if err != nil {
		return fmt.Errorf("hostlocal: unlock %s: %w", s.lockPath(), err)
	}
	return nil
}

func (s *Source) lockPath() string { return filepath.Join(s.dir, lockName) }

// do runs fn as operation op under s.mu and host-local's lock: the one Lock
// holds, or one taken for fn alone.
func (s *Source) do(ctx context.Context, op string, fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("hostlocal: %s %s: %w", op, s.dir, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("hostlocal: %s %s: %w", op, s.dir, err)
	}
	if s.held == nil {
		f, err := acquire(ctx, s.lockPath())
		if err != nil {
			return err
		}
		defer f.Close()
	}
	return fn()
}

// List returns every allocation in the network's directory: one entry per
// key, with the addresses of the files that name it as their owner. It
// skips what is not an allocation: the lock file, the last_reserved_ip
// files (see LastReserved), and files and directories whose name is not an
// address. A file or directory named after an address that cannot be read
// as host-local writes it is reported, wrapping ErrMalformed and naming its
// path, in a *source.ListError returned with the entries that could be
// read. If the directory itself cannot be read, List fails.
func (s *Source) List(ctx context.Context) (map[Key]Allocation, error) {
	var out map[Key]Allocation
	err := s.do(ctx, "list", func() error {
		s.index = nil
		files, bad, err := s.scan()
		if err != nil {
			return fmt.Errorf("hostlocal: list %s: %w", s.dir, err)
		}
		if s.held != nil {
			s.index = files
		}
		out = make(map[Key]Allocation)
		for _, f := range files {
			a := out[f.key]
			a.IPs = append(a.IPs, f.addr)
			out[f.key] = a
		}
		for k, a := range out {
			slices.SortFunc(a.IPs, netip.Addr.Compare)
			out[k] = a
		}
		if len(bad) > 0 {
			return &source.ListError{Errs: bad}
		}
		return nil
	})
	return out, err
}

// LegacyKind is source.Durable: host-local's files survive a restart of
// the process (and, on disk, a reboot).
func (s *Source) LegacyKind() source.Kind { return source.Durable }

// Put makes alloc the addresses of key: it reserves each address key does
// not hold yet through the plugins' disk store (a file named after the
// address, holding the container ID and interface name), then removes the
// files of addresses key held and alloc lacks, and fsyncs the new files
// and the directory before it returns.
//
// If another key, or a file List cannot read, holds one of the addresses,
// Put fails with ErrReserved, removes what it reserved, and changes no
// other address file; so it does when a reservation fails otherwise
// (last_reserved_ip may have moved: see WithRangeIndex). If a replaced
// address's file cannot be removed, Put fails and the key holds its new
// addresses and the old ones not yet removed.
//
// key must be of s's network; its ContainerID must be non-empty, and its
// ContainerID and IfName valid UTF-8 without whitespace or control
// characters (an empty IfName writes the pre-v0.8.0 form). alloc must
// hold at least one address, in the form [NewAllocation] builds, with no
// zone and no IPv4-mapped IPv6 address (host-local names such a file as
// IPv4). Anything else fails with ErrInvalid.
func (s *Source) Put(ctx context.Context, key Key, alloc Allocation) error {
	if err := s.checkKey(key); err != nil {
		return fmt.Errorf("hostlocal: put %s: %w", key, err)
	}
	if err := checkAllocation(alloc); err != nil {
		return fmt.Errorf("hostlocal: put %s: %w", key, err)
	}
	return s.do(ctx, "put", func() error { return s.put(key, alloc) })
}

func (s *Source) put(key Key, alloc Allocation) error {
	files, err := s.files()
	if err != nil {
		return fmt.Errorf("hostlocal: put %s: %w", key, err)
	}
	// A failed write leaves the index unknown; a successful one updates it.
	index := s.index
	s.index = nil
	have := map[netip.Addr]string{} // key's addresses and their files
	for _, f := range files {
		if f.key == key {
			have[f.addr] = f.path
		}
	}
	made, err := s.reserveNew(key, alloc, have, files)
	if err != nil {
		return fmt.Errorf("hostlocal: put %s: %w", key, err)
	}
	want := map[netip.Addr]bool{}
	for _, ip := range alloc.IPs {
		want[ip] = true
	}
	removed := 0
	for ip, path := range have {
		if want[ip] {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hostlocal: put %s: releasing a replaced address: %w", key, err)
		}
		removed++
	}
	if len(made)+removed > 0 {
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("hostlocal: put %s: %w", key, err)
		}
	}
	if index != nil {
		for ip := range have {
			delete(index, ip)
		}
		for _, ip := range alloc.IPs {
			index[ip] = file{addr: ip, path: disk.GetEscapedPath(s.dir, ip.String()), key: key}
		}
		s.index = index
	}
	return nil
}

// reserveNew reserves the addresses of alloc that key does not have yet
// and fsyncs their files. On an error it removes what it reserved. files
// names the holders for ErrReserved.
func (s *Source) reserveNew(key Key, alloc Allocation, have map[netip.Addr]string, files map[netip.Addr]file) ([]string, error) {
	var made []string
	for _, ip := range alloc.IPs {
		if _, ok := have[ip]; ok {
			continue
		}
		path, err := s.reserve(key, ip)
		if err == nil {
			made = append(made, path)
			continue
		}
		removeAll(made)
		if errors.Is(err, ErrReserved) {
			owner := "a file this package cannot read (see List's errors)"
			if f, ok := files[ip]; ok {
				owner = f.key.String()
			}
			return nil, fmt.Errorf("hostlocal: %w: %s is held by %s", err, path, owner)
		}
		return nil, err
	}
	for _, path := range made {
		if err := syncFile(path); err != nil {
			removeAll(made)
			return nil, err
		}
	}
	return made, nil
}

// files returns the readable address files: the index if Lock holds the
// lock and a read under it made one, else what a read of the directory
// finds now (which becomes the index under Lock). Files that cannot be
// read are left out: their addresses stay reserved all the same, because
// Reserve refuses an existing file.
func (s *Source) files() (map[netip.Addr]file, error) {
	if s.index != nil {
		return s.index, nil
	}
	files, _, err := s.scan()
	if err != nil {
		return nil, err
	}
	if s.held != nil {
		s.index = files
	}
	return files, nil
}

// reserve creates ip's file for key and returns its path, or ErrReserved
// if the file exists.
func (s *Source) reserve(key Key, ip netip.Addr) (string, error) {
	path := disk.GetEscapedPath(s.dir, ip.String())
	if s.cfg.rangeIndex != nil {
		if idx, ok := s.cfg.rangeIndex(ip); ok && idx >= 0 {
			ok, err := s.store.Reserve(key.ContainerID, key.IfName, ip.AsSlice(), strconv.Itoa(idx))
			switch {
			case err != nil:
				s.undoReserve(path, key)
				return path, err
			case !ok:
				return path, ErrReserved
			}
			return path, nil
		}
	}
	return path, reserveFile(path, key)
}

// undoReserve removes the file of a Reserve that failed after creating it:
// Reserve returns an error, and leaves the address's file behind, when it
// cannot write last_reserved_ip. The lock is held and the file was not
// key's before, so a file that names key is the one Reserve made.
func (s *Source) undoReserve(path string, key Key) {
	data, _, err := readSmall(path, make([]byte, 128))
	if err != nil {
		return
	}
	if owner, err := parseOwner(s.network, string(data)); err == nil && owner == key {
		_ = os.Remove(path)
	}
}

// Delete removes every file that names key as its owner, and fsyncs the
// directory. Unlike host-local's ReleaseByID, it does not fall back to
// files holding only the container ID when key has an interface name:
// those are key{IfName: ""}, another key. key must be of s's network
// (ErrInvalid otherwise); deleting a key that holds nothing is not an
// error.
func (s *Source) Delete(ctx context.Context, key Key) error {
	if key.Network != s.network {
		return fmt.Errorf("hostlocal: delete %s: %w: the key is of network %q, this Source's is %q", key, ErrInvalid, key.Network, s.network)
	}
	return s.do(ctx, "delete", func() error {
		files, err := s.files()
		if err != nil {
			return fmt.Errorf("hostlocal: delete %s: %w", key, err)
		}
		index := s.index
		s.index = nil
		var removed []netip.Addr
		for _, f := range files {
			if f.key != key {
				continue
			}
			if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("hostlocal: delete %s: %w", key, err)
			}
			removed = append(removed, f.addr)
		}
		if len(removed) > 0 {
			if err := syncDir(s.dir); err != nil {
				return fmt.Errorf("hostlocal: delete %s: %w", key, err)
			}
		}
		if index != nil {
			for _, ip := range removed {
				delete(index, ip)
			}
			s.index = index
		}
		return nil
	})
}

// LastReserved returns the address host-local last reserved in range set
// rangeIndex (the file last_reserved_ip.<rangeIndex>), where its next
// allocation in that range set starts looking, round-robin. It returns the
// zero Addr if there is none. A file that does not hold one address fails
// with ErrMalformed; host-local itself takes that as none and starts from
// the beginning of the range set. It is not an allocation, and List never
// returns it.
func (s *Source) LastReserved(ctx context.Context, rangeIndex int) (netip.Addr, error) {
	if rangeIndex < 0 {
		return netip.Addr{}, fmt.Errorf("hostlocal: last reserved: %w: range index %d is negative", ErrInvalid, rangeIndex)
	}
	var addr netip.Addr
	err := s.do(ctx, "last reserved", func() error {
		var err error
		addr, err = readLastReserved(filepath.Join(s.dir, lastReservedPrefix+"."+strconv.Itoa(rangeIndex)))
		return err
	})
	return addr, err
}
