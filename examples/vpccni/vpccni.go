package vpccni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// Key is an allocation's key: the CNI's (network name, container ID,
// interface name), as ipamd keeps it.
type Key = datastore.IPAMKey

// Alloc is an allocation as ipamd checkpoints it, less its key: the
// fields of a datastore.CheckpointEntry after its IPAMKey, with their JSON
// names. (In ipam.json the key is part of each entry; in the Store, the
// key is the entry's, and a value is only what it holds.)
type Alloc struct {
	IPv4                string                 `json:"ipv4,omitempty"`
	IPv6                string                 `json:"ipv6,omitempty"`
	AllocationTimestamp int64                  `json:"allocationTimestamp"`
	Metadata            datastore.IPAMMetadata `json:"metadata"`
}

// allocOf returns e less its key.
func allocOf(e datastore.CheckpointEntry) Alloc {
	return Alloc{IPv4: e.IPv4, IPv6: e.IPv6, AllocationTimestamp: e.AllocationTimestamp, Metadata: e.Metadata}
}

// entryOf returns the entry of ipamd's checkpoint that a holds under k.
func entryOf(k Key, a Alloc) datastore.CheckpointEntry {
	return datastore.CheckpointEntry{IPAMKey: k, IPv4: a.IPv4, IPv6: a.IPv6, AllocationTimestamp: a.AllocationTimestamp, Metadata: a.Metadata}
}

// Config says where ipamd's state lives and which phase this binary runs.
type Config struct {
	// Phase is the rollout's phase: a flag or an environment variable of
	// the DaemonSet (migrate.ParsePhase reads either form).
	Phase migrate.Phase
	// LegacyPath is ipamd's own checkpoint, which the released binary
	// reads and writes (/var/run/aws-node/ipam.json).
	LegacyPath string
	// CheckpointPath is phaseshift's checkpoint, beside it. Empty: the
	// LegacyPath with ".json" replaced by ".phaseshift.json"
	// (/var/run/aws-node/ipam.phaseshift.json, and ipam-nic-1.phaseshift.json
	// beside network card 1's ipam-nic-1.json): one checkpoint per network
	// card, as ipamd keeps one file per card.
	CheckpointPath string
	// CheckpointOptions are passed to checkpoint.Open (a boot ID, a logger).
	CheckpointOptions []checkpoint.Option
	// Version is this build's version, recorded in the checkpoint.
	Version string
	// Logger receives the restore report and write failures; nil logs
	// nothing.
	Logger *zap.Logger
}

// StoreConfig returns the migrate.Config of ipamd's allocations over
// legacy (a *Legacy, or what stands in for it in a test) and cp: ipamd's
// file is an explicit legacy, which the Store writes in phases 0 to 2, and
// no two allocations hold one address (Unique). Open uses it; a test of
// the rollout (migratetest) starts from it too.
func StoreConfig(phase migrate.Phase, legacy source.Reader[Key, Alloc], cp migrate.Checkpoint[Key, Alloc]) migrate.Config[Key, Alloc] {
	return migrate.Config[Key, Alloc]{Phase: phase, Legacy: legacy, Checkpoint: cp, Unique: Addresses}
}

// Addresses returns the addresses an allocation holds.
func Addresses(e Alloc) []string {
	var out []string
	for _, a := range []string{e.IPv4, e.IPv6} {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Checkpointer is a datastore.Checkpointer backed by a migrate.Store: ipamd
// adopts phaseshift by passing one to datastore.NewDataStore in place of
// datastore.NewJSONFile(path), and nothing else of its code changes.
//
// Restore (ipamd's ReadBackingStore calls it once, at start) runs the
// Store's Restore and hands ipamd what it serves; Checkpoint (called with
// the whole state at every change) makes the Store's state that snapshot
// with migrate.Store.Replace, which writes only what changed. The methods
// are safe for concurrent use.
type Checkpointer struct {
	store *migrate.Store[Key, Alloc]

	mu      sync.Mutex // guards the fields below
	report  migrate.Report[Key]
	snap    map[Key]Alloc // reused by every Checkpoint
	restore bool          // Restore has succeeded
}

var _ datastore.Checkpointer = (*Checkpointer)(nil)

// ErrShared is returned by a second Restore of one Checkpointer: it serves
// one DataStore (one network card), and each card's needs its own.
var ErrShared = errors.New("this Checkpointer already restored a DataStore: give each network card's DataStore its own (vpccni.Open over that card's ipam-nic-N.json)")

// Open opens phaseshift's checkpoint (it takes its lock: one ipamd at a
// time) and returns a Checkpointer over it and ipamd's file, in cfg's
// phase. Close releases the lock.
func Open(ctx context.Context, cfg Config) (*Checkpointer, error) {
	if cfg.LegacyPath == "" && cfg.Phase != migrate.PhaseContract {
		return nil, fmt.Errorf("vpccni: Config.LegacyPath is required in phase %d (%s): it is ipamd's ipam.json, which the released binary reads", int(cfg.Phase), cfg.Phase)
	}
	if cfg.CheckpointPath == "" && cfg.LegacyPath == "" {
		return nil, fmt.Errorf("vpccni: Config.CheckpointPath is required where there is no LegacyPath: where phaseshift's checkpoint lives")
	}
	if cfg.CheckpointPath == "" {
		cfg.CheckpointPath = strings.TrimSuffix(cfg.LegacyPath, ".json") + ".phaseshift.json"
	}
	f, err := checkpoint.Open[Key, Alloc](ctx, cfg.CheckpointPath, cfg.CheckpointOptions...)
	if err != nil {
		return nil, fmt.Errorf("vpccni: %w", err)
	}
	var legacy source.Reader[Key, Alloc]
	if cfg.LegacyPath != "" {
		legacy = NewLegacy(cfg.LegacyPath)
	}
	scfg := StoreConfig(cfg.Phase, legacy, f)
	scfg.Version, scfg.Logger = cfg.Version, cfg.Logger
	s, err := migrate.New(scfg)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("vpccni: %w", err)
	}
	return &Checkpointer{store: s}, nil
}

// Restore restores the Store and fills into (ipamd passes a
// *datastore.CheckpointData) with what it serves, in the order of the
// keys. An into of another type gets the same data through JSON, as
// datastore.TestCheckpoint does.
//
// A Checkpointer serves one DataStore, of one network card, whose
// Checkpoint hands it that card's whole state: ipamd's ReadBackingStore
// calls Restore once per DataStore, and a second call (a second DataStore
// given the same Checkpointer, whose Checkpoints would each replace the
// other card's allocations) fails with ErrShared. Open one per card, over
// that card's file, as ipamd's InitializeDataStores makes one JSONFile per
// card.
func (c *Checkpointer) Restore(into interface{}) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restore {
		return fmt.Errorf("vpccni: %w", ErrShared)
	}
	r, err := c.store.Restore(context.Background())
	if err != nil {
		return fmt.Errorf("vpccni: %w", err)
	}
	c.report, c.restore = r, true
	data := datastore.CheckpointData{Version: datastore.CheckpointFormatVersion, Allocations: make([]datastore.CheckpointEntry, 0, c.store.Len())}
	for k, a := range c.store.All() {
		data.Allocations = append(data.Allocations, entryOf(k, a))
	}
	slices.SortFunc(data.Allocations, func(a, b datastore.CheckpointEntry) int { return compareKeys(a.IPAMKey, b.IPAMKey) })
	if p, ok := into.(*datastore.CheckpointData); ok {
		*p = data
		return nil
	}
	b, err := json.Marshal(&data)
	if err != nil {
		return fmt.Errorf("vpccni: %w", err)
	}
	return json.Unmarshal(b, into)
}

// Checkpoint makes data, ipamd's whole state (a *datastore.CheckpointData
// or a datastore.CheckpointData), the Store's state, and returns once it
// is durable on every side the phase writes. ipamd undoes the allocation
// it made when Checkpoint fails, and the Store has then changed nothing.
func (c *Checkpointer) Checkpoint(data interface{}) error {
	var d *datastore.CheckpointData
	switch v := data.(type) {
	case *datastore.CheckpointData:
		d = v
	case datastore.CheckpointData:
		d = &v
	default:
		return fmt.Errorf("vpccni: Checkpoint takes a *datastore.CheckpointData, not a %T", data)
	}
	if d.Version != datastore.CheckpointFormatVersion {
		return fmt.Errorf("vpccni: Checkpoint of format %q, not %q", d.Version, datastore.CheckpointFormatVersion)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil {
		c.snap = make(map[Key]Alloc, len(d.Allocations))
	}
	clear(c.snap)
	for _, a := range d.Allocations {
		if _, dup := c.snap[a.IPAMKey]; dup {
			return fmt.Errorf("vpccni: Checkpoint: allocation %v appears twice", a.IPAMKey)
		}
		c.snap[a.IPAMKey] = allocOf(a)
	}
	if err := c.store.Replace(context.Background(), c.snap); err != nil {
		return fmt.Errorf("vpccni: %w", err)
	}
	return nil
}

// Report returns what the Store's Restore did (zero before it ran).
func (c *Checkpointer) Report() migrate.Report[Key] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.report
}

// Store returns the Store, for metrics (package metrics) and the control
// socket (package migrate/control).
func (c *Checkpointer) Store() *migrate.Store[Key, Alloc] { return c.store }

// Close closes the Store and releases the checkpoint's lock. It is
// idempotent.
func (c *Checkpointer) Close() error { return c.store.Close() }
