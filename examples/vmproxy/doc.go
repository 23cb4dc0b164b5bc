// Command vmproxy is a VM proxy, modelled on the Clear Containers proxy
// (cc-proxy), that survives its own restart: it keeps a registry of VMs,
// their I/O tokens and their I/O sessions, stores every change in a
// checkpoint file before acknowledging it, and after a crash, a kill -9 or an
// upgrade restarts with exactly what it acknowledged.
//
// It is the example of package migrate for a daemon whose legacy side is its
// own memory. The cc-proxy review that asked for this (store on every
// mutation, not only at registration; restore at start; log and go on by
// default, --error-on-failure-to-restore to fail) is what it implements.
//
// # Running it
//
//	go run ./examples/vmproxy --socket /tmp/vmp/proxy.sock --state /tmp/vmp/state.json --log-format console
//
// Flags: --socket (control socket, default /run/vmproxy/proxy.sock),
// --state (checkpoint, default /run/vmproxy/state.json), --phase (see below;
// else $PHASESHIFT_PHASE, else contract), --error-on-failure-to-restore,
// --lock-wait (how long a second instance waits for the first to release
// --state, default 5s), --log-level and --log-format. SIGTERM or SIGINT shuts
// it down cleanly: it stops accepting, lets each connection finish the
// request it is handling, removes the socket and releases the checkpoint's
// lock. Exit codes: 0 after a clean shutdown, 1 when it cannot start or
// serve (stderr says why and what to do), 2 for a bad command line.
//
// Logs go to stderr through zap: VM IDs, session IDs, counts and paths. Token
// values and the rest of the state are never logged, because a token opens a
// process's I/O stream; not even the text of a rejected request is logged,
// since it may quote one.
//
// # Control protocol
//
// One JSON object per line on the unix socket, answered by one JSON object
// per line, in order; a connection may send any number of requests. Unknown
// fields are refused, so a misspelt field is an error rather than a silent
// default. Every answer has "ok"; a refusal has "error" (for people) and
// "code" (for programs: bad_request, unknown_op, not_found, conflict, or
// not_stored when the checkpoint could not be written and nothing changed).
//
//	op          fields               answer
//	register    vm, console          vm
//	attach      vm                   vm, attached (how many attaches so far)
//	token       vm                   vm, token (new, random, 128 bits)
//	open        token [, vm]         vm, session (one open session per token)
//	close       session [, vm]       vm, session (the token stays, to reconnect)
//	unregister  vm                   vm (its tokens and sessions go with it)
//	list        [vm]                 vms: each VM with its tokens and sessions
//
// JSON lines rather than HTTP over the socket: the proxy it models speaks
// framed JSON over a unix socket too, every request is one small
// call-and-answer that needs no methods, headers or status codes, a person
// can drive it with socat or nc -U, and the standard library parses it
// without a router. The control socket is the proxy's API, so list returns
// token values: whoever may connect (mode 0600) may read them.
//
// A session, with socat (or nc -U /tmp/vmp/proxy.sock):
//
//	$ socat - UNIX-CONNECT:/tmp/vmp/proxy.sock
//	{"op":"register","vm":"vm-1","console":"/run/vc/vm-1/console.sock"}
//	{"ok":true,"vm":"vm-1"}
//	{"op":"attach","vm":"vm-1"}
//	{"ok":true,"vm":"vm-1","attached":1}
//	{"op":"token","vm":"vm-1"}
//	{"ok":true,"vm":"vm-1","token":"ZO5L3MSJEHXU3EMESLN54TOJOX"}
//	{"op":"open","token":"ZO5L3MSJEHXU3EMESLN54TOJOX"}
//	{"ok":true,"vm":"vm-1","session":"s-ef38e5ae1cb9495e"}
//	{"op":"open","token":"ZO5L3MSJEHXU3EMESLN54TOJOX"}
//	{"ok":false,"error":"token already has an open session (s-ef38e5ae1cb9495e)","code":"conflict"}
//	{"op":"list"}
//	{"ok":true,"vms":[{"vm":"vm-1","console":"/run/vc/vm-1/console.sock","registered":"2026-11-30T08:38:24.550261635Z","attached":1,"tokens":[{"token":"ZO5L3MSJEHXU3EMESLN54TOJOX","created":"2026-11-30T08:38:24.555853634Z","session":"s-ef38e5ae1cb9495e"}],"sessions":[{"session":"s-ef38e5ae1cb9495e","token":"ZO5L3MSJEHXU3EMESLN54TOJOX","opened":"2026-11-30T08:38:24.557334147Z"}]}]}
//	{"op":"close","session":"s-ef38e5ae1cb9495e"}
//	{"ok":true,"vm":"vm-1","session":"s-ef38e5ae1cb9495e"}
//	{"op":"unregister","vm":"vm-1"}
//	{"ok":true,"vm":"vm-1"}
//
// # Every change is stored before it is acknowledged
//
// The state is a migrate.Store keyed by VM ID whose values are VM records
// (console, attach count, tokens, sessions). The proxy keeps no other copy:
// register and every change to a VM (attach, token, open, close) is a
// Store.Update that reads the VM, changes a private clone and commits it
// durably in one transaction; unregister deletes it in one. Only then is the
// answer written. The version of cc-proxy that stored only at registration
// lost every token and session created afterwards; here a change that is not
// stored has no place to live. The functional tests kill -9 the real binary
// between random changes and check that every acknowledged one is back.
//
// # Migration walk-through
//
// The old proxy (v1) kept its registry in memory only: a restart, a crash or
// an upgrade lost every VM, and the shims of running containers with them.
// The registry is this program's legacy side (a source.Map the Store writes
// explicitly); the checkpoint at --state is the new source of truth. Unlike
// a CNI plugin's legacy side (the container runtime, which outlives the
// plugin), this one is empty after every restart, so the Store is told so
// (migrate.Config.VolatileLegacy) and never takes its emptiness as evidence:
//
//   - v1, phase 0 (legacy): the old behaviour. Changes go to the registry
//     only, and a restart starts empty. This binary still takes the
//     checkpoint's lock and marks the file behind legacy, so that a later
//     phase 3 refuses a file that missed phase 0's changes and phases 1 and
//     2 do not bring back what phase 0 removed (and, on the first restart
//     after a phase-3 run, phase 0 restores from the checkpoint, because it
//     knows the registry is stale).
//   - v2, phases 1 (expand) and 2 (migrate): write both, restore from the
//     checkpoint and refill the registry with what they restored
//     (Report.LegacyWrites). The proxy survives a restart from phase 1 on.
//   - v3, phase 3 (contract), the default: restores from the checkpoint and
//     writes only the checkpoint. The registry is not used at all.
//
// The rollout to follow is the usual one, 0 → 1 → 2 → 3, and any step back
// is safe as long as it goes back to this binary's phase 0, not to the real
// v1 (see Caveats).
//
// The default is contract because the rollout's usual reason to go slowly,
// keeping the previous version's source fresh so that a downgrade finds it
// current, does not apply: v1 loses its state at every restart whatever is
// kept for it. What remains is the one unsafe transition (see Caveats).
//
// # When the state cannot be restored
//
// Full failure, the file as a whole unreadable (checksum mismatch,
// truncation, written by a newer schema): by default the file is moved aside
// to <state>.corrupt-<UTC time>, the log says where, and the proxy starts
// with no VMs and a fresh file. With --error-on-failure-to-restore it exits
// with status 1, leaves the file untouched, and stderr names the path, the
// problem and the ways out.
//
// Partial failure, an intact file in which some VMs' entries cannot be
// decoded: by default the other VMs are restored, each VM that was not is
// logged by ID (never by value), and the original file is moved aside to
// <state>.corrupt-<UTC time> so that the bad entries can be recovered by hand
// before a new file with the readable VMs replaces it. With
// --error-on-failure-to-restore it exits with status 1 and leaves the file
// untouched.
//
// In every mode: a file that cannot be read for a reason other than its
// content (EIO, permissions) stops the start, so that it is never replaced;
// a file written before the last reboot is discarded, because its VMs died
// with that boot; a file superseded by a phase-0 run stops phase 3 (run once
// with --phase migrate, then contract again).
//
// Only one proxy serves a --state: the second one started on it waits
// --lock-wait and exits with "checkpoint is locked by process N".
//
// # Caveats
//
//   - Going back to the real v1 binary, which does not know the file, leaves
//     it stale: a v2 or v3 started after it would bring back VMs and tokens
//     that v1 forgot or removed. Delete --state before starting v2 or v3
//     again, or roll back to this binary with --phase legacy instead of v1. Keeping --state on /run, which a reboot empties, and the boot
//     ID check cover the common case of a reboot in between.
//   - A restored session is a record, not a connection: the I/O streams of a
//     real proxy die with its process, and a shim has to reconnect with its
//     token. This example carries no I/O.
//   - A change whose answer the client did not get (the proxy was killed
//     between the commit and the reply) may or may not be there after the
//     restart: a client that reconnects should list before retrying.
//   - Tokens are kept in the checkpoint in clear, protected by its mode
//     (0600, in a 0700 directory): do not attach the file to a bug report.
//   - Every change rewrites and fsyncs the whole file; concurrent changes
//     share a write (group commit). That suits the tens or hundreds of VMs of
//     a node, not a database's load. open and close without a vm scan every
//     VM for the token or session.
//   - The control socket has no authentication beyond its mode.
package main
