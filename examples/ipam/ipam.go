package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri"
)

// Key is the CNI spec's primary key for IPAM state: "Plugins that store
// state should do so using a primary key of (network name, CNI_CONTAINERID,
// CNI_IFNAME)".
type Key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// The placeholders of an entry learned from CRI, which records neither the
// network nor the interface (the VPC CNI's names, kept so a file written by
// either reads the same).
const (
	BackfillNetwork = "_migrated-from-cri"
	BackfillIfName  = "unknown"
)

// Alloc is what IPAM assigned to one key.
type Alloc struct {
	IPs       []netip.Addr `json:"ips"`
	Allocated time.Time    `json:"allocated"`
}

// byContainer is the Match of the store: CRI knows only the sandbox, so
// entries are one entry when their container IDs are equal. A DEL with the
// real key finds an entry learned from CRI under placeholders (the VPC CNI
// leaked IPs when it did not: its issue #1411).
func byContainer(k Key) Key { return Key{ContainerID: k.ContainerID} }

// sameIPs compares allocations by what CRI can know of them.
func sameIPs(a, b Alloc) bool { return slices.Equal(a.IPs, b.IPs) }

// fromSandbox turns a sandbox CRI reports into an entry with placeholder
// network and interface. Sandboxes without an IP hold nothing of ours.
func fromSandbox(s cri.Sandbox) (Key, Alloc, bool) {
	if len(s.IPs) == 0 {
		return Key{}, Alloc{}, false
	}
	return Key{Network: BackfillNetwork, ContainerID: s.ID, IfName: BackfillIfName},
		Alloc{IPs: s.IPs, Allocated: s.CreatedAt}, true
}

// ErrPoolExhausted is returned by Add when every address is assigned.
var ErrPoolExhausted = errors.New("ipam: no free address in the pool")

// IPAM assigns addresses from one prefix, keeping its assignments in a
// migrate.Store. All methods are safe for concurrent use; assignments are
// serialised, as ipamd does.
type IPAM struct {
	store *migrate.Store[Key, Alloc]
	pool  netip.Prefix

	mu   sync.Mutex // guards used and serialises Add and Del
	used map[netip.Addr]Key
}

// Options configure Open.
type Options struct {
	Phase      migrate.Phase
	Lister     *cri.Lister // the legacy side: nil in phase 3 means no cross-check
	StatePath  string
	Pool       netip.Prefix
	Strict     bool
	Logger     *zap.Logger
	LockWait   time.Duration
	WriterName string
}

// Open takes the checkpoint's lock, restores, and returns the IPAM with the
// restore report. Phase 0 is the old binary: it does not touch the file.
func Open(ctx context.Context, o Options) (*IPAM, migrate.Report[Key], error) {
	cfg := migrate.Config[Key, Alloc]{
		Phase:  o.Phase,
		Match:  byContainer,
		Equal:  sameIPs,
		Strict: o.Strict,
		Writer: o.WriterName,
		Logger: o.Logger,
	}
	if o.Lister != nil {
		legacy, err := cri.Reader(o.Lister, fromSandbox)
		if err != nil {
			return nil, migrate.Report[Key]{}, err
		}
		cfg.Legacy = legacy
	}
	if o.Phase != migrate.PhaseLegacy {
		f, err := checkpoint.Open[Key, Alloc](ctx, o.StatePath, checkpoint.WithLockWait(o.LockWait), checkpoint.WithLogger(o.Logger))
		if err != nil {
			return nil, migrate.Report[Key]{}, err
		}
		cfg.Checkpoint = f
	}
	store, err := migrate.New(cfg)
	if err != nil {
		if c, ok := cfg.Checkpoint.(*checkpoint.File[Key, Alloc]); ok {
			c.Close()
		}
		return nil, migrate.Report[Key]{}, err
	}
	rep, err := store.Restore(ctx)
	if err != nil {
		store.Close()
		return nil, rep, err
	}
	ipam := &IPAM{store: store, pool: o.Pool, used: map[netip.Addr]Key{}}
	for k, v := range store.All() {
		for _, ip := range v.IPs {
			if other, dup := ipam.used[ip]; dup {
				// Two entries with one IP: report it, never hand it out a
				// third time.
				o.Logger.Error("address restored twice", zap.Stringer("ip", ip), zap.Any("key", k), zap.Any("other", other))
			}
			ipam.used[ip] = k
		}
	}
	return ipam, rep, nil
}

// Add assigns an address to key (a CNI ADD). An ADD for a container that
// already has one returns it, and records the real key in place of
// placeholders learned from CRI.
func (m *IPAM) Add(ctx context.Context, key Key) (Alloc, error) {
	if key.ContainerID == "" {
		return Alloc{}, errors.New("ipam: ADD without a container ID")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.store.Get(key); ok {
		if stored, _ := m.store.Key(key); stored != key {
			if err := m.store.Put(ctx, key, a); err != nil {
				return Alloc{}, err
			}
		}
		return a, nil
	}
	ip, ok := m.free()
	if !ok {
		return Alloc{}, fmt.Errorf("%w %s (%d assigned)", ErrPoolExhausted, m.pool, len(m.used))
	}
	a := Alloc{IPs: []netip.Addr{ip}, Allocated: time.Now().UTC().Truncate(time.Second)}
	// Durable before the address is used or reported.
	if err := m.store.Put(ctx, key, a); err != nil {
		return Alloc{}, err
	}
	m.used[ip] = key
	return a, nil
}

// Del releases key's address (a CNI DEL). Releasing what is not assigned is
// not an error: the kubelet retries DELs.
func (m *IPAM) Del(ctx context.Context, key Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.store.Get(key)
	if !ok {
		return nil
	}
	if err := m.store.Delete(ctx, key); err != nil {
		return err
	}
	for _, ip := range a.IPs {
		delete(m.used, ip)
	}
	return nil
}

// free returns the lowest address not assigned, skipping the network
// address and the gateway (.1) and, for IPv4, the broadcast address.
func (m *IPAM) free() (netip.Addr, bool) {
	ip := m.pool.Masked().Addr().Next().Next()
	for ; ip.IsValid() && m.pool.Contains(ip); ip = ip.Next() {
		if ip.Is4() && !m.pool.Contains(ip.Next()) {
			break // broadcast
		}
		if _, taken := m.used[ip]; !taken {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// Entries returns every assignment.
func (m *IPAM) Entries() map[Key]Alloc {
	out := map[Key]Alloc{}
	for k, v := range m.store.All() {
		out[k] = v
	}
	return out
}

// Close closes the store and releases the checkpoint's lock.
func (m *IPAM) Close() error { return m.store.Close() }
