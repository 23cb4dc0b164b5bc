package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

type (
	key   = hostlocal.Key
	alloc = hostlocal.Allocation
)

// envBootID is a test hook: when set, its value is the boot ID, in place
// of the kernel's (/proc/sys/kernel/random/boot_id), so that a test can
// play a reboot without rebooting. Nothing else reads it; leave it unset on
// a node.
const envBootID = "PHASESHIFT_HOSTLOCAL_BOOT_ID"

// pluginVersion is what the checkpoint records as its writer.
const pluginVersion = "phaseshift examples/hostlocal"

// bootID returns the boot the checkpoint is stamped with: a checkpoint of
// an earlier boot is stale (its containers died with the reboot).
func bootID() (string, error) {
	if id := os.Getenv(envBootID); id != "" {
		return id, nil
	}
	return checkpoint.KernelBootID()
}

// session is one exec's hold on the network: the checkpoint and, in the
// phases that use them, host-local's files, both locked, and the Store
// restored from them. Every exec opens one, makes at most one write, and
// closes it.
type session struct {
	c      *config
	src    *hostlocal.Source // host-local's files; nil in phase 3
	store  *migrate.Store[key, alloc]
	report migrate.Report[key]
}

// openSession takes the locks in the order package source/hostlocal
// documents, so that no exec of this plugin and no host-local binary can
// deadlock with another: the checkpoint's first (every exec of this
// plugin, in every phase, queues there), then host-local's (which old
// host-local binaries wait for, held only from before Restore reads the
// files to after the write). Then it restores.
func openSession(ctx context.Context, c *config, tr *tracer) (*session, error) {
	// Phase 0 opens the checkpoint too: its Restore marks the file as
	// superseded by a phase-0 run (once per boot), so that a later phase 3
	// refuses it instead of serving what host-local has changed since.
	// A wait for another exec's lock is logged (with its PID) to stderr,
	// which the runtime keeps.
	cp, err := checkpoint.Open[key, alloc](ctx, c.checkpoint, append(checkpointOptions(), checkpoint.WithLogger(logger()))...)
	if err != nil {
		return nil, err
	}
	tr.mark("open")
	s := &session{c: c}
	// Left nil, not a nil *hostlocal.Source, in phase 3: New tells them
	// apart.
	var legacy source.Reader[key, alloc]
	if c.phase.WritesLegacy() {
		src, err := openLegacy(ctx, c)
		if err != nil {
			return nil, errors.Join(err, cp.Close())
		}
		tr.mark("lock")
		s.src, legacy = src, src
	}
	cfg := storeConfig(c.phase, legacy, cp, logger())
	st, err := migrate.New(cfg)
	if err != nil {
		return nil, errors.Join(err, s.closeSource(), cp.Close())
	}
	s.store = st
	s.report, err = st.Restore(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("restore (phase %d, %s): %w", int(c.phase), c.phase, err), s.close())
	}
	if r := s.report; r.Stale != "" || r.LegacyStale != "" || r.Quarantined != "" || len(r.Errors) > 0 {
		// The Store logs every restore at Info; these are the ones an
		// operator should see: a side not trusted as it was (host-local ran
		// since, a reboot, a rollback from phase 3), or not read in full.
		cfg.Logger.Warn("restore did not trust a side as it was, or could not read all of it", zap.Object("report", r))
	}
	tr.mark("restore")
	tr.restored(st)
	return s, nil
}

// checkpointOptions are what every exec opens the checkpoint with (and
// rollout_test.go's matrix): the boot it runs in, so that a checkpoint of
// an earlier boot, whose containers died with it, is discarded.
func checkpointOptions() []checkpoint.Option {
	return []checkpoint.Option{checkpoint.WithBootID(bootID)}
}

// openLegacy opens host-local's files of c's network and takes host-local's
// lock: step 2 of the lock order of package source/hostlocal, after the
// checkpoint's.
func openLegacy(ctx context.Context, c *config) (*hostlocal.Source, error) {
	src, err := hostlocal.Open(c.dataDir, c.network, hostlocal.WithRangeIndex(c.rangeIndex))
	if err != nil {
		return nil, err
	}
	if err := src.Lock(ctx); err != nil {
		return nil, errors.Join(err, src.Close())
	}
	return src, nil
}

// storeConfig is the configuration of one exec's Store in phase, over
// host-local's files (legacy, an explicit one: the Store writes it) and the
// checkpoint. openSession builds every exec's Store from it, and
// rollout_test.go proves every rollout of it safe.
func storeConfig(phase migrate.Phase, legacy source.Reader[key, alloc], cp migrate.Checkpoint[key, alloc], log *zap.Logger) migrate.Config[key, alloc] {
	cfg := migrate.Config[key, alloc]{
		Phase:      phase,
		Checkpoint: cp,
		Equal:      sameIPs,
		Unique:     addresses,
		Version:    pluginVersion,
		Logger:     log,
		// Every exec restores: only a legacy whose writes the next exec
		// sees may be trusted, as host-local's files are.
		ShortLived: true,
	}
	// Phases 0 to 2 read and write host-local's files. Phase 3 leaves them
	// alone: a legacy still configured in phase 3 is read only to compare,
	// and these files, no longer written, would differ at every exec.
	if phase.WritesLegacy() {
		cfg.Legacy = legacy
	}
	return cfg
}

// close releases host-local's lock, for which old binaries may be
// waiting, and then the checkpoint's.
func (s *session) close() error {
	return errors.Join(s.closeSource(), s.store.Close())
}

func (s *session) closeSource() error {
	if s.src == nil {
		return nil
	}
	return s.src.Close()
}

// sameIPs is Config.Equal: an allocation is its addresses.
func sameIPs(a, b alloc) bool { return slices.Equal(a.IPs, b.IPs) }

// addresses is Config.Unique: no two containers hold one address.
func addresses(a alloc) []string {
	s := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		s[i] = ip.String()
	}
	return s
}

// logger writes warnings and errors to stderr, which runtimes collect from
// a plugin (stdout carries the result). The Store logs keys, counts and
// paths, never values.
func logger() *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(os.Stderr), zap.WarnLevel)
	return zap.New(core).With(zap.String("plugin", "phaseshift-host-local"))
}
