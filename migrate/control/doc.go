// Package control serves a daemon's own migrate.Store on a local unix
// socket, so that an operator can list, read and delete entries of a
// running daemon with the phaseshift command (checkpoint/cmd/phaseshift)
// without stopping it: a delete goes through the Store's Delete, so that
// what the daemon serves and what its checkpoint holds agree afterwards.
// Nothing else reaches the Store that way: the socket takes three
// requests, list, get and delete, and no put.
//
// It is opt-in: a daemon calls [Listen] (behind a flag, say) with its
// Store once it holds the checkpoint's lock, and [Server.Close] before it
// closes the Store:
//
//	store, err := migrate.New(cfg) // cfg.Checkpoint from checkpoint.Open(ctx, path): the lock is held
//	...
//	srv, err := control.Listen(control.SocketPath(path), store, control.WithLogger(log))
//	defer srv.Close()
//
// # The socket
//
// The socket of the checkpoint at path is path+".control.sock"
// ([SocketPath]): the phaseshift command finds it from the checkpoint's
// path, and uses it when a process holds the checkpoint's lock and the
// socket is there. Under a DaemonSet it lies on the state's hostPath, next
// to the checkpoint, where a pod that mounts the same hostPath (or
// kubectl exec into the daemon's own pod) reaches it.
//
// Listen creates the socket owner-only (mode 0600, by binding it under a
// temporary name and renaming it into place once its mode is set), and
// replaces a socket a daemon that died left at the path, but nothing that
// is not a socket. Each connection's peer is checked with SO_PEERCRED: a
// process of the daemon's own user or root is served, any other refused
// (and logged) before its request is read.
//
// # Protocol
//
// One request per connection, one JSON object on one line; the answer is
// JSON lines, entries first, then one status line:
//
//	→ {"op":"list"}                  ← {"key":K,"value":V} per entry, then {"status":"ok","count":N}
//	→ {"op":"get","key":K}           ← {"key":K,"value":V}, then {"status":"ok","count":1}
//	→ {"op":"delete","key":K}        ← {"status":"ok","count":1}
//	                                 ← {"status":"error","code":"no-such-key","error":"..."} and the like
//
// Keys and values are the JSON encoding/json gives the Store's K and V. A
// key in a request must read back as itself: it is decoded into K, with
// fields K lacks refused, and encoded again, and the two must be the same
// JSON value; so a key typed by hand cannot quietly lose a field and name
// another entry. get and delete find the entry as Store.Get finds it (with
// the Store's Match, if it has one). The error codes are [CodeNoSuchKey],
// [CodeBadKey], [CodeBadRequest], [CodeRefused], [CodeBusy] and
// [CodeFailed]; the [Client] turns them into errors matching
// [ErrNoSuchKey], [ErrBadKey], [ErrRefused] or a [*RemoteError].
//
// # Caveats
//
//   - The peer check trusts the kernel's SO_PEERCRED (Linux): it names the
//     process that connected, and root in the daemon's user namespace.
//   - A unix socket's path is at most 107 bytes: Listen fails, naming the
//     path, for a longer one.
//   - The socket is served until Close; a daemon killed with SIGKILL leaves
//     it behind, and the next Listen replaces it. The phaseshift command
//     uses the socket only while a process holds the checkpoint's lock, and
//     falls back to the file when nothing answers on it.
//   - A list is a snapshot of the Store (Store.All); a get or delete sees
//     the Store at that instant. A delete of a key another writer deletes
//     at the same time may report the entry deleted when the other's
//     delete removed it: either way it is gone.
//   - Errors and logs name keys, uids, PIDs, paths and counts, never
//     values; list and get answer with values, because that is what they
//     are asked for.
package control
