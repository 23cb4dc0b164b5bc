package hostlocal

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"golang.org/x/sys/unix"
)

const (
	// lockName is the file host-local locks: NewFileLock in the plugins'
	// backend/disk/lock.go, given the network directory, locks
	// path.Join(dir, "lock") with flock(2) through go-filemutex.
	lockName = "lock"
	// lastReservedPrefix names host-local's round-robin hints:
	// "last_reserved_ip.<range index>" since plugins v0.6.0, plain
	// "last_reserved_ip" in the host-local of containernetworking/cni
	// before it. Neither is an allocation.
	lastReservedPrefix = "last_reserved_ip"
	// maxFileSize bounds what is read of one file. host-local writes a
	// container ID and an interface name; anything near this size is not
	// one of its files.
	maxFileSize = 64 << 10
)

// file is one address file that could be read.
type file struct {
	addr netip.Addr
	path string
	key  Key
}

// scan reads the network's directory: the address files it could read, by
// address, an error wrapping ErrMalformed for each it could not, or an
// error if the directory itself could not be read.
func (s *Source) scan() (map[netip.Addr]file, []error, error) {
	d, err := os.Open(s.dir)
	if err != nil {
		return nil, nil, err
	}
	// File.ReadDir, unlike os.ReadDir, does not sort: order does not
	// matter here and a large network has thousands of files.
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, nil, &fs.PathError{Op: "readdir", Path: s.dir, Err: err}
	}
	files := make(map[netip.Addr]file, len(entries))
	var bad []error
	buf := make([]byte, 512)
	for _, e := range entries {
		name := e.Name()
		if name == lockName || strings.HasPrefix(name, lastReservedPrefix) {
			continue
		}
		addr, err := netip.ParseAddr(name)
		if err != nil {
			// Not an address: host-local never treats it as a reservation
			// either (GetByID skips names net.ParseIP rejects).
			continue
		}
		path := filepath.Join(s.dir, name)
		if !canonical(addr) || addr.String() != name {
			bad = append(bad, malformed(path, "the name is an address, but not in the form host-local writes (net.IP.String)"))
			continue
		}
		if !e.Type().IsRegular() {
			bad = append(bad, malformed(path, "not a regular file"))
			continue
		}
		var data []byte
		data, buf, err = readSmall(path, buf)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		key, err := parseOwner(s.network, string(data))
		if err != nil {
			bad = append(bad, &fs.PathError{Op: "read", Path: path, Err: err})
			continue
		}
		files[addr] = file{addr: addr, path: path, key: key}
	}
	return files, bad, nil
}

// readSmall reads the file at path into buf (grown as needed, up to
// maxFileSize) without following a symlink. It returns the data and the
// buffer to reuse. It calls open(2), read(2) and close(2) directly: a
// network holds thousands of files, and os.OpenFile adds an fstat and an
// attempt to register each with the poller.
func readSmall(path string, buf []byte) ([]byte, []byte, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, buf, malformed(path, "a symbolic link")
		}
		return nil, buf, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		n += m
		if n > maxFileSize {
			return nil, buf, malformed(path, fmt.Sprintf("larger than %d bytes", maxFileSize))
		}
		if m == 0 {
			return buf[:n], buf, nil
		}
	}
}

// parseOwner reads the owner of an address file, in any form host-local
// has written:
//
//   - "<id>\r\n<ifname>": plugins v0.8.0 and later (disk.LineBreak);
//   - "<id>\n<ifname>": the first form of plugins PR #203, September 2018,
//     replaced by the one above before the PR merged; no release wrote it;
//   - "<id>": before plugins v0.8.0 (untrimmed before v0.6.0).
//
// host-local compares contents after strings.TrimSpace (backend.go,
// FindByKey and ReleaseByKey), so this does too.
func parseOwner(network, data string) (Key, error) {
	t := strings.TrimSpace(data)
	if t == "" {
		return Key{}, fmt.Errorf("hostlocal: %w: empty: host-local was killed between creating the file and writing its owner, or it was truncated; the address stays reserved until the file is removed", ErrMalformed)
	}
	id, ifname := t, ""
	if i := strings.Index(t, disk.LineBreak); i >= 0 {
		id, ifname = t[:i], t[i+len(disk.LineBreak):]
	} else if i := strings.IndexByte(t, '\n'); i >= 0 {
		id, ifname = t[:i], t[i+1:]
	}
	if err := checkPart("the container ID", id); err != nil {
		return Key{}, fmt.Errorf("hostlocal: %w: %w", ErrMalformed, err)
	}
	if err := checkPart("the interface name", ifname); err != nil {
		return Key{}, fmt.Errorf("hostlocal: %w: %w", ErrMalformed, err)
	}
	return Key{Network: network, ContainerID: id, IfName: ifname}, nil
}

func malformed(path, why string) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("hostlocal: %w: %s", ErrMalformed, why)}
}

// checkPart reports why s cannot be a container ID or interface name in a
// file that List reads back as it was written: whitespace would be trimmed
// or split on, a control character or invalid UTF-8 would not survive
// encoding/json. It does not reject an empty s.
func checkPart(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%s holds whitespace or a control character", what)
		}
	}
	return nil
}

func checkNetwork(network string) error {
	switch {
	case network == "":
		return fmt.Errorf("hostlocal: %w: empty network name", ErrInvalid)
	case network == "." || network == ".." || strings.ContainsRune(network, '/'):
		return fmt.Errorf("hostlocal: %w: network name %q is not a single directory name", ErrInvalid, network)
	}
	if err := checkPart("the network name", network); err != nil {
		return fmt.Errorf("hostlocal: %w: %w", ErrInvalid, err)
	}
	return nil
}

func (s *Source) checkKey(k Key) error {
	if k.Network != s.network {
		return fmt.Errorf("hostlocal: %w: the key is of network %q, this Source's is %q", ErrInvalid, k.Network, s.network)
	}
	if k.ContainerID == "" {
		return fmt.Errorf("hostlocal: %w: empty container ID", ErrInvalid)
	}
	if err := checkPart("the container ID", k.ContainerID); err != nil {
		return fmt.Errorf("hostlocal: %w: %w", ErrInvalid, err)
	}
	if err := checkPart("the interface name", k.IfName); err != nil {
		return fmt.Errorf("hostlocal: %w: %w", ErrInvalid, err)
	}
	if len(k.ContainerID)+len(k.IfName)+len(disk.LineBreak) > maxFileSize {
		return fmt.Errorf("hostlocal: %w: container ID and interface name longer than %d bytes together", ErrInvalid, maxFileSize-len(disk.LineBreak))
	}
	return nil
}

// canonical reports whether host-local could have named a file after a:
// it writes net.IP.String(), which has no zone and prints an IPv4-mapped
// IPv6 address as IPv4.
func canonical(a netip.Addr) bool {
	return a.IsValid() && a.Zone() == "" && !a.Is4In6()
}

func checkAllocation(a Allocation) error {
	if len(a.IPs) == 0 {
		return fmt.Errorf("hostlocal: %w: no addresses (to release a key's addresses, Delete it)", ErrInvalid)
	}
	for i, ip := range a.IPs {
		switch {
		case !ip.IsValid():
			return fmt.Errorf("hostlocal: %w: address %d is the zero netip.Addr", ErrInvalid, i)
		case ip.Zone() != "":
			return fmt.Errorf("hostlocal: %w: address %d has an IPv6 zone, which host-local cannot record", ErrInvalid, i)
		case ip.Is4In6():
			return fmt.Errorf("hostlocal: %w: address %d is IPv4-mapped IPv6, which host-local records as IPv4: use Unmap", ErrInvalid, i)
		case i > 0 && a.IPs[i-1].Compare(ip) >= 0:
			return fmt.Errorf("hostlocal: %w: addresses not in ascending order or duplicated (at %d): build the value with NewAllocation", ErrInvalid, i)
		}
	}
	return nil
}

// reserveFile creates the file of an address for key exactly as the
// plugins' disk.Store.Reserve does (O_EXCL, mode 0600, the trimmed
// container ID, disk.LineBreak, the interface name), without recording the
// address in a last_reserved_ip file. It returns ErrReserved if the file
// exists.
func reserveFile(path string, key Key) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_EXCL|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return ErrReserved
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(strings.TrimSpace(key.ContainerID) + disk.LineBreak + key.IfName); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// syncFile fsyncs a file Reserve wrote: host-local never does, and a Store
// acknowledges a write only once every side holds it durably.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs dir, which makes the creation and removal of its files
// durable (fsync(2): syncing a file does not sync its directory entry).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return d.Close()
}

// removeAll removes the files a failed Put created.
func removeAll(paths []string) {
	for _, p := range paths {
		_ = os.Remove(p)
	}
}

// readLastReserved reads a last_reserved_ip file as host-local's
// LastReservedIP does (net.ParseIP of the whole content), or returns the
// zero Addr if it does not exist.
func readLastReserved(path string) (netip.Addr, error) {
	data, _, err := readSmall(path, make([]byte, 64))
	if errors.Is(err, fs.ErrNotExist) {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(string(data))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, malformed(path, "does not hold one address")
	}
	return a.Unmap(), nil
}
