// Package fleet is the project's fleet test: a rollout 0 → 1 → 2 → 3 of
// examples/ipam over 24 nodes, gated by a real Prometheus that evaluates
// metrics/phaseshift.rules.yml as it ships, with the faults operators meet
// on the way. It has no code of its own beyond its tests:
//
//	go test ./examples/fleet
//
// Each node is a built examples/ipam daemon (--serve --metrics
// --control-socket) on its own 127.0.0.1 port, reading its own fake CRI
// runtime (source/cri/critest) over a unix socket and keeping its own
// checkpoint; Prometheus (Debian's prometheus package, started by the test
// with its own data directory and configuration) discovers them through a
// targets file, with instance naming the node, scrapes them and evaluates
// the rules every second, and the expected count of nodes is the README's
// stated phaseshift:expected_nodes rule. The test moves the fleet the way
// the README says - the release before phaseshift (--old-binary), the new
// binary at phase 0, then each phase after phaseshift gate allows it - and
// plays, between the steps, the faults of issues 32 and 33:
//
//   - a cp of state.json.prev over the checkpoint of a running daemon;
//   - phaseshift restore-prev, then a start in phase 3 (which must refuse)
//     and in phase 2 (which must rebuild from CRI);
//   - the example's phase 0, then back to phase 2, and to phase 3 (which
//     must refuse);
//   - the release before phaseshift, then straight back to phase 2, with
//     a DEL and an ADD that reuses the address;
//   - a journal written by a newer build (a field this build lacks, on a
//     value later replaced or deleted);
//   - a node missing from discovery, a restart into a blocking state right
//     before the gate is read (a gate started at the daemon's first
//     answer, and one started once Prometheus holds it down, both refuse),
//     and an orphan taken to phase 3, healed on that node alone (the
//     node-local phase override, phaseshift report, phaseshift
//     prune-orphans).
//
// After every step it checks what each node serves against the pods that
// exist: every pod with its address (nothing acknowledged lost), no
// address to two pods, nothing deleted served except an orphan the
// library documents (an entry only the checkpoint has, kept because the
// runtime's listing could have missed it). It checks the gate through the
// built phaseshift gate, run as the README runs it (its default --poll
// and --timeout), which must answer within 30s: at 24 targets scraped
// every second, Prometheus spreads the scrapes across the second, which is
// what made the gate's wait for fresh data never end (issue 42 item 5).
// It checks the alerts through Prometheus's HTTP API, waiting on
// conditions, never for a while.
//
// # Caveats
//
//   - The test skips, saying how to install it, where the prometheus binary
//     is not on PATH (.ci/run installs it).
//   - The daemons stand in for a CNI IPAM daemon: the test plays the
//     runtime (its sandboxes) and the plugin (the ADDs and DELs), and each
//     node's runtime is in the test's process.
//   - A node is taken out of discovery by rewriting Prometheus's targets
//     file, which is what a cluster's service discovery changes; a
//     Kubernetes DaemonSet's own behaviour (pod replacement, scheduling) is
//     not modelled beyond a restart of the daemon on the same node.
package fleet
