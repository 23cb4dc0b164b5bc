// Package control serves a daemon's own migrate.Store on a local unix
// socket, so that an operator can list, read and delete entries of a
// running daemon with the phaseshift command (cmd/phaseshift)
// without stopping it: a delete goes through the Store's Delete, so that
// what the daemon serves and what its checkpoint holds agree afterwards.
// With [WithReport] it also serves the restore's report - the keys of the
// entries restore left orphaned or diverged, as the JSON the command takes
// - and prunes the orphans the operator confirms, so that nobody types a
// key. Nothing else reaches the Store that way: the socket takes list,
// get, delete, report and prune-orphans, and no put.
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
// Listen first checks the socket's directory as checkpoint.Open checks
// the checkpoint's: owned by the daemon's user or root, and writable by
// nobody else unless it is sticky (an error matching [ErrUnsafe] that says
// chmod go-w DIR otherwise): whoever may write it may put a socket of
// their own, or a symlink, where the daemon's should be. It creates the
// socket owner-only (mode 0600) by binding it in a new directory of its
// own (mode 0700, beside the path), setting its mode there, where the
// name can only be the socket it bound, and renaming it into place: no
// name in the shared directory is ever chmodded. It replaces a socket a
// daemon that died left at the path (one that refuses connections), but
// refuses ([ErrInUse]) one that another process still serves, naming it,
// and anything that is not a socket. Each connection's peer is checked
// with SO_PEERCRED: a process of the daemon's own user or root is served,
// any other refused (and logged) before its request is read.
//
// At most 4 requests are served at once; more are answered busy. A
// request's slot is given back once its answer is written to the
// connection (a list's entries flushed to the client), before the status
// line that ends it, so that a client that waits for one answer before it
// sends the next is never told busy because of its own last request; a
// client that never reads a long list holds its slot until the write
// deadline (WithTimeout). The request must arrive within WithTimeout; a Delete
// waits at most that long for its turn, and once a commit has taken it,
// it runs to its end, and its outcome is answered (within a timeout of
// its own): a delete that became durable is reported done, however long
// its save took. A panic while answering (a MarshalJSON of the Store's key
// or value type, the Store itself) is recovered and answered as a failure
// naming its type, as package migrate recovers one in its writes; the
// daemon goes on serving.
//
// # Protocol
//
// One request per connection, one JSON object on one line; the answer is
// JSON lines, entries first, then one status line:
//
//	→ {"op":"list"}                  ← {"key":K,"value":V} per entry, then {"status":"ok","count":N}
//	→ {"op":"get","key":K}           ← {"key":K,"value":V}, then {"status":"ok","count":1}
//	→ {"op":"delete","key":K}        ← {"status":"ok","count":1}
//	→ {"op":"report"}                ← {"kind":"orphaned","key":K} and {"kind":"diverged","key":K} per entry
//	                                   still as restore left it, then {"status":"ok","count":N,"report":LINE}
//	→ {"op":"prune-orphans","keys":[K,...]}
//	                                 ← {"key":K,"pruned":true} or {"key":K,"pruned":false,"reason":"..."}
//	                                   per key, then {"status":"ok","count":PRUNED}
//	                                 ← {"status":"error","code":"no-such-key","error":"..."} and the like
//
// Keys and values are the JSON encoding/json gives the Store's K and V. A
// key in a request must read back as itself: it is decoded into K, with
// fields K lacks refused, and encoded again, and the two must be the same
// JSON value, and no object in it may have a field twice (encoding/json
// would keep the last); so a key typed by hand cannot quietly lose a field
// and name another entry. Numbers in keys are compared exactly, in time
// linear in their length. get and delete find the entry as Store.Get
// finds it (with the Store's Match, if it has one), and get answers with
// the key the entry is stored under (Store.Key), which is what list shows:
// with a Match, it may differ from the key asked for (a placeholder
// network of an entry learned from legacy, say). The error codes are
// [CodeNoSuchKey], [CodeBadKey], [CodeBadRequest], [CodeRefused],
// [CodeBusy], [CodeFailed] and [CodeNoReport]; the [Client] turns them into
// errors matching [ErrNoSuchKey], [ErrBadKey], [ErrRefused], [ErrNoReport]
// or a [*RemoteError].
//
// # The restore's report
//
// A Store does not keep the Report of its Restore; a daemon that gives it
// to Listen (WithReport) serves it. report lists the Report's orphaned
// and diverged keys that are still as restore left them: a write or
// delete of an entry since (its migrate.Origin is then OriginWrite, or it
// is gone) settles it, as package metrics counts it for the fleet gate.
// prune-orphans takes keys that report listed and deletes, in one commit
// of the Store (an Update, durable on every side its phase writes before
// it answers), each that is an orphan of the Report and still as restore
// left it, judged in that commit (migrate.Tx.Origin): an orphan written
// since the operator's listing - the runtime's ADD came again - is no
// longer an orphan, and is kept, with its reason. A key that report never
// listed is not deleted: delete is for that.
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
//   - A Client reads answer lines of at most 4 MiB (one entry of a list,
//     as JSON), so that whatever serves the socket cannot make the command
//     hold more: an entry larger than that is read from the file instead
//     (phaseshift list --file).
//   - report and prune-orphans know the orphans of the restore of this
//     run of the daemon only: a restart restores again, and its Report
//     decides.
package control
