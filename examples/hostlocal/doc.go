// Command hostlocal is a CNI IPAM plugin, host-local's allocator and
// network configuration, that moves a node's allocations from host-local's
// files to a phaseshift checkpoint, one phase at a time, without ever
// losing an address or handing one out twice, while the runtime keeps
// calling whichever binary is installed.
//
// It is a real plugin on github.com/containernetworking/cni's skel: ADD,
// DEL, CHECK, GC and STATUS (CNI 1.1), VERSION, for every CNI version
// host-local supports. Build it as a plugin binary with
//
//	CGO_ENABLED=0 go build -o /opt/cni/bin/phaseshift-host-local ./examples/hostlocal
//
// and see README.md in this directory for the configuration, the rollout
// and the measurements.
//
// # Network configuration
//
// The "ipam" section is host-local's ("ranges", the old single-range
// "subnet", "rangeStart", "rangeEnd", "gateway", "routes", "dataDir",
// "resolvConf"; the runtime's "ips" and "ipRanges" capabilities; "IP" in
// CNI_ARGS and "args.cni.ips"), read with host-local's defaults and rules,
// plus two fields:
//
//   - "phase": the rollout phase, a name or a number ("legacy" or 0,
//     "expand" or 1, "migrate" or 2, "contract" or 3). Absent, it is 0:
//     installed under host-local's name, the plugin does what host-local
//     does.
//   - "checkpoint": the checkpoint file, an absolute path. Absent, it is
//     <dataDir>/.phaseshift/<network>.json: one per network, next to
//     host-local's <dataDir>/<network> and not in it (host-local reads every
//     file of that directory on each ADD and DEL; no CNI network can be
//     named ".phaseshift", a name must start with a letter or digit).
//
// Allocation is host-local's, ported to net/netip (ranges.go): one address
// per range set, round-robin from host-local's last_reserved_ip.<index>,
// skipping gateways, an address the runtime asked for where it asked for
// one.
//
// # Errors
//
// A configuration or an ADD, DEL or CHECK that host-local refuses is
// refused with host-local's v1.7.1 message, word for word ("invalid range
// set 0: Network has host bits set. For a subnet mask of length 24 the
// network address is 192.0.2.0", "failed to allocate for range 0:
// requested IP address 192.168.1.5 is not available in range set
// 192.168.1.1-192.168.1.6", "host-local: Failed to find address added by
// container c1"), and host-local's CNI code: 999 (internal), which skel
// gives the plain errors host-local returns. The tests port host-local's
// own tests (56, from host_local_test.go, dns_test.go and
// backend/allocator) to exec'd plugins and run them against the real
// host-local and this plugin in every phase: every result the same byte
// for byte, every failure the same code and message. The differences,
// each tested (differences_test.go):
//
//   - A field of the wrong JSON type ("ranges": {}) is refused with
//     encoding/json's message, which names the Go types it was to be read
//     into: host-local's ("IPAMConfig.ipam.ranges of type
//     []allocator.RangeSet"), this plugin's ("ipamJSON.ipam.ranges of type
//     [][]main.rangeJSON").
//   - A second ADD of an attachment that holds addresses fails with
//     host-local's "duplicate allocation is not allowed" also when
//     host-local lets it through: when it asks for a free address, or when
//     its addresses are in none of the configured ranges. host-local then
//     reserves another address for it; this plugin keeps one allocation
//     per attachment.
//   - A null among the requested addresses ("ips": [null]) fails with
//     "cannot understand ip: IP <nil> not v4 nor v6", host-local's message
//     for an empty one; host-local panics on it.
//   - When requested addresses are left unmet, host-local lists them in a
//     random order, and of two requested addresses in one range set it
//     grants either; this plugin lists them in the order asked, and grants
//     the first.
//   - The two fields this plugin adds fail with code 7 (invalid network
//     configuration): a "phase" it does not know, a "checkpoint" that is
//     not an absolute path. host-local ignores both.
//   - CHECK also checks the previous result's addresses (below), with a
//     message of its own.
//   - GC and STATUS are this plugin's (below); host-local v1.7.1 answers
//     both with success and does nothing.
//   - Failures of the files and locks (a data directory it cannot create,
//     a checkpoint it cannot read, a lock that stays taken: code 11,
//     phase 3 refusing a checkpoint after phase 0) are phaseshift's, and
//     say so.
//
// # One exec
//
// Every exec opens the checkpoint (taking its lock), takes host-local's
// lock on <dataDir>/<network> in the phases that use its files (0 to 2),
// restores, makes at most one write, and releases both locks: the order
// package source/hostlocal documents, so that no exec of this plugin and
// no host-local binary deadlocks with another, however many run at once.
// The locks serialise the execs of one network; 32 ADDs at once get 32
// addresses.
//
//	phase       restore reads                    an ADD writes
//	0 legacy    host-local's files               host-local's files (the checkpoint is only marked, once per boot)
//	1 expand    host-local's files, and rewrites the checkpoint from them   both
//	2 migrate   the checkpoint, reconciled with the files                  both
//	3 contract  the checkpoint                   the checkpoint (and host-local's round-robin hint)
//
// ADD allocates inside one Store.Update, from the state the restore
// served. DEL releases the attachment (or, as host-local does, a file from
// before plugins v0.8.0 that names its container alone). CHECK checks that
// the attachment holds addresses and that the previous result's addresses
// in the plugin's ranges are among them. GC releases, in one commit
// (Store.DeleteFunc), every allocation not in the runtime's
// "cni.dev/valid-attachments"; it refuses a GC without that list rather
// than release everything. STATUS restores and answers "not available"
// (code 50) when an ADD could not succeed: restore refuses, a lock stays
// taken, or a range set is full.
//
// # Rolling it out
//
// Install the binary in place of host-local (or under its own name with
// "type" changed): with no "phase" it is phase 0, and host-local's files
// stay the truth. Then set "phase" to 1 on every node, to 2, and to 3 once
// no node can go back to host-local. At any phase but 3, the old
// host-local binary may serve the next exec; from 3, roll back through
// this plugin's phases 0 to 2 first, which heal host-local's files from
// the checkpoint. Phase 3 never directly follows the old binary: run
// phase 1 or 2 first (this plugin's phase 0 marks the checkpoint, and
// phase 3 refuses it, with an error that says why).
//
// A reboot kills every container. The checkpoint records the boot it was
// written in (the kernel's boot ID), and one from an earlier boot is
// discarded: in phase 3 a node starts empty after a reboot, where
// host-local leaked every address until something released it. In phases
// 0 to 2 host-local's files are still the evidence, and the dead
// containers' addresses stay reserved, as with host-local, until the
// runtime's GC (or DEL) releases them.
//
// # Exec'd processes and a legacy that lags
//
// An exec'd plugin has no memory between execs: every exec restores, so in
// phases 0 to 2, where restore takes legacy's word on which entries exist
// (phase 1 always, phase 2 over a checkpoint it cannot trust, phase 0 by
// definition), legacy must already hold every write acknowledged before the
// exec started. An explicit legacy does: host-local's files are written,
// and fsynced, before an ADD returns, and the next exec reads them under
// the same lock. The container runtime's sandbox list over CRI does not: it
// lists a sandbox only once the sandbox is ready, after its ADD returned,
// so an exec restoring from CRI misses the ADDs just before it, and phase
// 1, which rewrites the checkpoint from legacy at every restore, forgets
// them and hands their addresses out again (58 ADDs all got one address,
// when an exec'd plugin was tried that way). A legacy that lags needs a
// long-running daemon that restores once, at start, when the runtime's
// list is as complete as it gets, and then keeps its state in memory
// (examples/ipam); or an exec'd plugin in phase 3 only, where legacy is at
// most read to compare.
//
// # Test and diagnostic hooks
//
// Two environment variables, which runtimes pass on to plugins, exist for
// tests and measurements; leave them unset on a node:
//
//   - PHASESHIFT_HOSTLOCAL_BOOT_ID replaces the kernel's boot ID, so that a
//     test can reboot a node by changing it;
//   - PHASESHIFT_HOSTLOCAL_TRACE names a file to which each exec appends
//     one JSON line with the time it reached each stage (see trace.go).
//
// # Caveats
//
//   - Linux only: both locks are flock(2) locks.
//   - Every exec reads the whole checkpoint and, in phases 0 to 2, every
//     file of host-local's directory (host-local reads them all on each
//     ADD and DEL too), and each commit writes the whole checkpoint, so an
//     exec's cost grows with the number of allocations. Commits are
//     fsynced (the checkpoint, and host-local's files in phases 0 to 2),
//     which host-local never does.
//   - Restore runs for every command, CHECK and STATUS included, and phase
//     1's restore rewrites the checkpoint each time: one fsynced save per
//     exec on top of the command's own.
//   - Phase 3 does not write host-local's files, which go stale; only
//     their last_reserved_ip hint is kept moving (not fsynced, as in
//     host-local). The files are not removed.
//   - A second ADD of an attachment that holds addresses fails, also when
//     it asks for a free address (host-local then reserves a second one):
//     see Errors.
//   - A failed ADD does not move the round-robin hint. host-local's can:
//     when a requested address is in no range set, it reserves one from
//     each range set, releases them, and keeps the hint moved.
//   - An exec waits for the locks up to a minute (STATUS ten seconds);
//     when it gives up, or the runtime stops it with SIGTERM, it fails with
//     CNI code 11, "try again later" (STATUS: 50, not available).
//   - The plugin needs to write the checkpoint's directory in every phase,
//     phase 0 included (it marks the checkpoint).
//   - Warnings (a checkpoint moved aside, a stale side) go to stderr as
//     JSON lines; runtimes keep a plugin's stderr in their logs.
package main
