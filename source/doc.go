// Package source defines the legacy side of a migration: whatever the
// previous version of a daemon trusted to learn its state back after a
// restart.
//
// A legacy source is read through a [Reader]. For an IPAM daemon it is the
// container runtime's list of pod sandboxes (see package source/cri); for a
// VM proxy it is the registry the proxy keeps in memory; for a daemon moving
// between file formats it is the old file. Package migrate composes a Reader
// with a checkpoint file and decides, per rollout phase, which of the two a
// restart restores from and which of them every write goes to.
//
// # Explicit and implicit writes
//
// A Reader that also implements [Writer] takes explicit writes: in the phases
// that write legacy, migrate.Store calls Put and Delete on it for every
// change, so that a downgrade to a version that reads only the legacy source
// finds it current. A Reader without Writer is taken to be kept current by
// someone else. The container runtime is the example: it knows a pod sandbox
// exists because it created the sandbox and then called the CNI plugin, so
// nothing the plugin does needs to be written back to it, and a sandbox list
// is never stale with respect to the plugin's own work.
//
// A Writer that is also a [BatchWriter] takes each commit's changes in one
// call (a legacy that is one file is then rewritten once per commit, not once
// per key).
//
// [Func] adapts a function to a Reader. [Map] is a concurrency-safe
// in-memory Reader and Writer, good as a proxy's registry and as a test fake.
//
// # Kinds
//
// What a restore may conclude from a legacy's word depends on its [Kind]:
// a [Durable] legacy (a file) holds every write acknowledged before a
// restart; a [Volatile] one (a registry in memory, a [Map]) is empty after
// every restart; an [Observing] one (CRI) lags in both directions. A source
// says its kind by implementing [Kinded]; a Reader that takes no writes is
// Observing by construction, and migrate refuses a Writer that does not
// say, rather than guess ([KindOf]).
//
// # Caveats
//
// A Reader returns all entries at once; sources with millions of entries
// should be paged by the adapter, not by this package. List may return a
// [*ListError] together with the entries it could read, to report entries it
// could not; migrate then restores the rest (or fails, in strict mode). Any
// other error means the whole side could not be read. A Reader's keys need
// not be the checkpoint's keys: legacy often knows less (CRI does not record
// the CNI network or interface name), and migrate.Config.Match says which
// keys name the same entry.
package source
