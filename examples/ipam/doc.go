// Command ipam is an ipamd-style IP allocator that moves its state from the
// container runtime (CRI) to its own checkpoint file with phaseshift, the
// way the AWS VPC CNI did - without the stale-file bug it shipped first.
//
//	go run ./examples/ipam
//
// plays the demo: one node through upgrade → pods come and go → downgrade to
// the old binary → pods churn → upgrade → upgrade → kill -9 → restart →
// contract, and checks after every restart that every pod still has its
// address, that nothing deleted is still served, and that no address is
// assigned twice. Each daemon is a real process reading CRI over a unix
// socket from a small runtime the demo runs (package source/cri/critest)
// and keeping a real checkpoint file; the kill is a real SIGKILL. It exits 0
// only if every check held, and leaves nothing behind.
//
// # The migration
//
// Version N of the daemon kept no file: at start it listed the runtime's
// pod sandboxes over CRI and rebuilt its allocations from their IPs. Version
// N+1 wants a checkpoint, because CRI does not record what the CNI spec
// asks IPAM to key its state by - (network name, container ID, interface
// name) - and because listing every sandbox at start is slow on big nodes.
//
// The phase comes from --phase or PHASESHIFT_PHASE, and is 0 when neither
// says; a file <state>.phase beside the checkpoint, on the node, overrides
// both (a per-node heal under a DaemonSet, which gives every node the same
// phase: the README walks one):
//
//	0 legacy    restore from CRI, as the old release did; the file is
//	            opened and marked behind CRI, so that phase 3 refuses it
//	            until phase 1 or 2 has run
//	1 expand    restore from CRI and rewrite the file from it when it
//	            differs; every ADD and DEL also goes to the file
//	2 migrate   restore from the file, backfill what only CRI knows, keep
//	            (and report) what only the file knows
//	3 contract  the file only
//
// CRI learns of sandboxes from the runtime that creates them, so it is never
// written and never stale; phases 2 and 3 differ only in restore. Entries
// learned from CRI have network "_migrated-from-cri" and interface "unknown"
// (the VPC CNI's placeholders); Match is the container ID, so a CNI DEL with
// the real key still releases them, and an ADD retried with the real key
// replaces the placeholders.
//
// --old-binary plays the release before phaseshift: phase 0 that never
// opens the file (so it cannot mark it) and exports no phaseshift metrics.
// The demo and the fleet test (examples/fleet) use it to show what a
// rollback to that release does; a rollback of a fleet uses phase 0.
//
// Roll a fleet with the phase as an environment variable of the DaemonSet,
// one step at a time: this binary at phase 0 first, then 0 → 1 and wait for
// every node, → 2 and soak, → 3 only when no node can go back to a version
// without the checkpoint (phaseshift gate says when each step is safe).
// The demo's step 4 is the VPC CNI's bug: the file written in step 2 went
// stale while the old binary ran in step 3, and phase 1 rewrote it instead
// of trusting it.
//
// # On a real node
//
//	ipam --cri unix:///run/containerd/containerd.sock --state /var/run/ipam.json --phase expand
//
// restores from the node's runtime (CRI-O: unix:///var/run/crio/crio.sock),
// prints the report and the allocations, and exits. It writes the file the
// phase says it writes. It is an example, not a CNI plugin: it assigns no
// address to any real pod. It logs to stderr at info level (--log-level,
// -v for debug): the restore's report, with the keys of its orphaned and
// diverged entries as the JSON the phaseshift command takes.
//
//	ipam --cri unix:///run/containerd/containerd.sock --serve --metrics :9100
//
// stays up instead, answering ADD and DEL commands on stdin (JSON lines, as
// the demo's daemons do), and serves Prometheus metrics at /metrics while
// it does: package metrics' Collector over its Store (the README lists
// them; metrics/phaseshift.rules.yml gates a rollout on them) and Go's
// runtime and process metrics. --metrics and --control-socket need
// --serve, and every flag needs --cri (without it ipam plays the demo,
// which takes none): a flag that would be ignored is an error at start.
//
// # With no runtime installed
//
//	ipam --cri inprocess --state /tmp/ipam/state.json --phase migrate --serve --control-socket
//
// runs a CRI runtime of its own (package source/cri/critest, on a unix
// socket in a temporary directory, read over gRPC as a real one is): it
// lists a sandbox for every ADD the daemon acknowledged and removes it at
// the DEL or GC that released it, and keeps them in
// <state>.cri-sandboxes.json, so that they outlive the daemon as a real
// runtime's pods do. The README's operator walkthrough on a laptop runs
// this way, and a test runs it as written (internal/readme).
//
// # The --serve protocol
//
// --help prints it, and the README shows it: one JSON object per line on
// stdin, one JSON answer per line on stdout, the restore report first
// (serveProtocol in daemon.go).
//
// # The operator's repair on a live node
//
// With --serve --control-socket the daemon serves its Store on
// <state>.control.sock (package migrate/control, owner-only), and the
// phaseshift command (cmd/phaseshift) lists, reads and deletes
// entries through it while the daemon runs:
//
//	phaseshift delete /var/run/ipam.json '{"network":"demo-net","containerID":"c1","ifName":"eth0"}'
//
// It serves its restore's report there too (control.WithReport): phaseshift
// report lists the keys its restore left orphaned or diverged, and
// phaseshift prune-orphans deletes the orphans you confirm, without a key
// typed by hand.
//
// # Caveats
//
//   - The allocator serialises ADDs and DELs and keeps one address per
//     container: Match by container ID cannot tell two interfaces of one
//     pod apart.
//   - The pool is one prefix; real IPAM daemons manage ENIs, prefixes and
//     warm pools.
//   - Entries learned from CRI carry the sandbox's creation time as their
//     allocation time.
package main
