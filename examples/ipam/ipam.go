package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/metrics"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
	"github.com/phaseshift/phaseshift/source"
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
	// Pod is the pod the ADD was for (the CNI args K8S_POD_NAMESPACE and
	// K8S_POD_NAME), when the runtime passed it: GCByVeth needs it.
	Pod PodRef `json:"pod,omitzero"`
}

// PodRef names a pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Schema is the checkpoint's value schema: 2 since Alloc has Pod. A file
// of schema 1 reads as it is (Pod empty); a binary of schema 1 refuses a
// file of schema 2 instead of dropping Pod from every entry.
const Schema = 2

func sameEntry(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }

// checkpointOptions are the options every opening of the state file uses
// (and rollout_test.go): this binary's schema, and the boot epoch - the
// pods an allocation belongs to die with a reboot, so a state file that
// outlives one (--state on a disk rather than on /var/run's tmpfs) must be
// discarded, not served.
func checkpointOptions() []checkpoint.Option {
	return []checkpoint.Option{checkpoint.WithSchema(Schema), checkpoint.WithUpgrade(1, sameEntry), checkpoint.WithBootID(nil)}
}

// openCheckpoint opens the state file with this binary's schema.
func openCheckpoint(ctx context.Context, path string, opts ...checkpoint.Option) (*checkpoint.File[Key, Alloc], error) {
	opts = append(opts, checkpointOptions()...)
	return checkpoint.Open[Key, Alloc](ctx, path, opts...)
}

// byContainer is the Match of the store: CRI knows only the sandbox, so
// entries are one entry when their container IDs are equal. A DEL with the
// real key finds an entry learned from CRI under placeholders (the VPC CNI
// leaked IPs when it did not: its issue #1411).
func byContainer(k Key) Key { return Key{ContainerID: k.ContainerID} }

// sameIPs compares allocations by what CRI can know of them.
func sameIPs(a, b Alloc) bool { return slices.Equal(a.IPs, b.IPs) }

// addresses is Config.Unique: no two pods hold one address.
func addresses(a Alloc) []string {
	s := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		s[i] = ip.String()
	}
	return s
}

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
var ErrPoolExhausted = errors.New("no free address in the pool")

// IPAM assigns addresses from one prefix, keeping its assignments in a
// migrate.Store. All methods are safe for concurrent use: every assignment
// is an Update, which finds a free address in the state as it is when its
// turn comes and records it in the same commit; concurrent ADDs are
// group-committed.
type IPAM struct {
	store   *migrate.Store[Key, Alloc]
	pool    netip.Prefix
	metrics *metrics.Collector // the store's metrics, from its restore on
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

// storeConfig is the configuration of the daemon's Store in o.Phase, over
// legacy (CRI's sandboxes as fromSandbox shows them; nil for none) and the
// checkpoint (nil in phase 0, the old binary). Open builds the daemon's
// Store from it, and matrix_test.go proves every rollout of it safe: CRI is
// an implicit legacy with placeholder keys, which needs Match and Equal.
func storeConfig(o Options, legacy source.Reader[Key, Alloc], cp migrate.Checkpoint[Key, Alloc]) migrate.Config[Key, Alloc] {
	return migrate.Config[Key, Alloc]{
		Phase:      o.Phase,
		Legacy:     legacy,
		Checkpoint: cp,
		Match:      byContainer,
		Equal:      sameIPs,
		Unique:     addresses,
		Strict:     o.Strict,
		Version:    o.WriterName,
		Logger:     o.Logger,
	}
}

// Open takes the checkpoint's lock, restores, and returns the IPAM with the
// restore report. Phase 0 is the old binary: it does not touch the file.
func Open(ctx context.Context, o Options) (*IPAM, migrate.Report[Key], error) {
	// Interfaces left nil, not holding a nil pointer, where a side is
	// absent: New tells the two apart.
	var legacy source.Reader[Key, Alloc]
	if o.Lister != nil {
		l, err := cri.Reader(o.Lister, fromSandbox)
		if err != nil {
			return nil, migrate.Report[Key]{}, err
		}
		legacy = l
	}
	var cp migrate.Checkpoint[Key, Alloc]
	if o.Phase != migrate.PhaseLegacy {
		f, err := openCheckpoint(ctx, o.StatePath, checkpoint.WithLockWait(o.LockWait), checkpoint.WithLogger(o.Logger))
		if err != nil {
			return nil, migrate.Report[Key]{}, err
		}
		cp = f
	}
	cfg := storeConfig(o, legacy, cp)
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
	var mopts []metrics.Option
	if f, ok := cfg.Checkpoint.(*checkpoint.File[Key, Alloc]); ok {
		mopts = append(mopts, metrics.WithCheckpoint(f))
	}
	col, err := metrics.New(store, rep, mopts...)
	if err != nil {
		store.Close()
		return nil, rep, err
	}
	seen := map[netip.Addr]Key{}
	for k, v := range store.All() {
		for _, ip := range v.IPs {
			if other, dup := seen[ip]; dup {
				// Two entries with one IP: report it; the allocator never
				// hands it out a third time.
				o.Logger.Error("address restored twice", zap.Stringer("ip", ip), zap.Any("key", k), zap.Any("other", other))
			}
			seen[ip] = k
		}
	}
	return &IPAM{store: store, pool: o.Pool, metrics: col}, rep, nil
}

// Add assigns an address to key (a CNI ADD) for pod (zero if the runtime
// did not say). An ADD for a container that already has one returns it, and
// records the real key in place of placeholders learned from CRI.
func (m *IPAM) Add(ctx context.Context, key Key, pod PodRef) (Alloc, error) {
	if key.ContainerID == "" {
		return Alloc{}, errors.New("ipam: ADD without a container ID")
	}
	var out Alloc
	// Durable before the address is used or reported.
	err := m.store.Update(ctx, func(tx *migrate.Tx[Key, Alloc]) error {
		if a, ok := tx.Get(key); ok {
			// Stored under the real key from now on (a Put with a key that
			// matches replaces the placeholder).
			out = a
			tx.Put(key, a)
			return nil
		}
		ip, n, ok := m.free(tx.All())
		if !ok {
			return fmt.Errorf("ipam: %w %s (%d assigned)", ErrPoolExhausted, m.pool, n)
		}
		out = Alloc{IPs: []netip.Addr{ip}, Allocated: time.Now().UTC().Truncate(time.Second), Pod: pod}
		tx.Put(key, out)
		return nil
	})
	if err != nil {
		return Alloc{}, err
	}
	return out, nil
}

// Del releases key's address (a CNI DEL). Releasing what is not assigned is
// not an error: the kubelet retries DELs.
func (m *IPAM) Del(ctx context.Context, key Key) error {
	return m.store.Delete(ctx, key)
}

// free returns the lowest address of the pool that no entry holds,
// skipping the network address and the gateway (.1) and, for IPv4, the
// broadcast address; and how many addresses are assigned.
func (m *IPAM) free(entries iter.Seq2[Key, Alloc]) (netip.Addr, int, bool) {
	used := map[netip.Addr]bool{}
	for _, a := range entries {
		for _, ip := range a.IPs {
			used[ip] = true
		}
	}
	ip := m.pool.Masked().Addr().Next().Next()
	for ; ip.IsValid() && m.pool.Contains(ip); ip = ip.Next() {
		if ip.Is4() && !m.pool.Contains(ip.Next()) {
			break // broadcast
		}
		if !used[ip] {
			return ip, len(used), true
		}
	}
	return netip.Addr{}, len(used), false
}

// Attachment is one attachment the runtime says is still valid, as CNI
// 1.1's GC passes them (cni.dev/valid-attachments).
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// GC releases every assignment not among the valid attachments (a CNI GC),
// in one commit, and returns the keys it released. An entry learned from
// CRI, whose interface is not known, is kept when any valid attachment has
// its container.
func (m *IPAM) GC(ctx context.Context, valid []Attachment) ([]Key, error) {
	attached, containers := map[Attachment]bool{}, map[string]bool{}
	for _, a := range valid {
		attached[a] = true
		containers[a.ContainerID] = true
	}
	return m.store.DeleteFunc(ctx, func(k Key, _ Alloc) bool {
		if k.IfName == BackfillIfName {
			return !containers[k.ContainerID]
		}
		return !attached[Attachment{ContainerID: k.ContainerID, IfName: k.IfName}]
	})
}

// GCByVeth releases every assignment whose pod's host-side veth no longer
// exists, as the VPC CNI does at start
// (normalizeCheckpointDataByPodVethExistence in its pkg/ipamd/datastore):
// pods deleted while the daemon was down leave their allocation behind.
// links lists the host's interface names. An entry without pod metadata is
// kept (it may predate the metadata). The daemon does not call it;
// gc_test.go shows its use. If links fails, nothing is released
// and the error is returned.
func (m *IPAM) GCByVeth(ctx context.Context, links func() ([]string, error)) ([]Key, error) {
	names, err := links()
	if err != nil {
		return nil, fmt.Errorf("ipam: listing the host's links: %w", err)
	}
	return m.store.DeleteFunc(ctx, func(_ Key, a Alloc) bool {
		if a.Pod.Namespace == "" || a.Pod.Name == "" {
			return false
		}
		suffix := vethSuffix(a.Pod)
		return !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, suffix) })
	})
}

// vethSuffix is the end of the name of a pod's host-side veth, as the VPC
// CNI makes it (GeneratePodHostVethNameSuffix in its pkg/networkutils): the
// first 11 hex digits of SHA-1("namespace.name").
func vethSuffix(p PodRef) string {
	h := sha1.Sum([]byte(p.Namespace + "." + p.Name))
	return hex.EncodeToString(h[:])[:11]
}

// Entries returns every assignment.
func (m *IPAM) Entries() map[Key]Alloc {
	out := map[Key]Alloc{}
	for k, v := range m.store.All() {
		out[k] = v
	}
	return out
}

// Metrics returns the Prometheus collector of the store (package
// metrics): what --metrics serves.
func (m *IPAM) Metrics() prometheus.Collector { return m.metrics }

// ServeControl serves the store on the control socket of the checkpoint at
// statePath (package migrate/control), for the phaseshift command's list,
// get and delete while the daemon runs. Close the server before the IPAM.
func (m *IPAM) ServeControl(statePath string, log *zap.Logger) (*control.Server[Key, Alloc], error) {
	return control.Listen(control.SocketPath(statePath), m.store, control.WithLogger(log))
}

// Close closes the store and releases the checkpoint's lock.
func (m *IPAM) Close() error { return m.store.Close() }
