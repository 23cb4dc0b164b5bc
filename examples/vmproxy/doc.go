// Command vmproxy is a VM proxy, modelled on the Clear Containers proxy
// (cc-proxy), that survives its own restart: it keeps a registry of VMs,
// their I/O tokens and their I/O sessions, stores every change in a
// checkpoint file before acknowledging it, and after a crash, a kill -9 or an
// upgrade restarts with exactly what it acknowledged.
//
// It is the example of package migrate for a daemon whose legacy side is its
// own memory (migrate.Config.VolatileLegacy). README.md in this directory is
// its manual: flags, the control protocol, the migration walk-through, what
// happens when the state cannot be restored.
//
//	go run ./examples/vmproxy --socket /tmp/vmp/proxy.sock --state /tmp/vmp/state.json --log-format console
//
// # Caveats
//
//   - Going back to the real v1 binary, which does not know the file, leaves
//     it stale: delete --state before starting v2 or v3 again, or roll back
//     to this binary with --phase legacy instead of v1.
//   - A restored session is a record, not a connection: the shim that holds
//     its token reconnects to it. This example carries no I/O.
//   - A change whose answer the client did not get may or may not be there
//     after a restart: a client that reconnects should list before retrying.
//   - Tokens are kept in the checkpoint in clear, protected by its mode.
//   - The control socket has no authentication beyond its mode.
package main
