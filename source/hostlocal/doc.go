// Package hostlocal reads and writes the on-disk store of the CNI host-local
// IPAM plugin, as a legacy source from which a plugin moves its
// allocations to a phaseshift checkpoint.
//
// host-local keeps one directory per network, <dataDir>/<network>
// (dataDir is /var/lib/cni/networks unless the network configuration says
// otherwise), and in it one file per allocated address, named after the
// address and holding the owner's container ID and interface name. A
// [Source] is that directory as a source.Reader and source.Writer of
// [Key] (network, container ID, interface name: the triple the CNI
// specification names an attachment by) and [Allocation] (the key's
// addresses). Give it to migrate.Config as Legacy: it implements
// source.Writer, so a Store writes it explicitly in phases 0 to 2, and an
// old host-local binary finds every allocation after a downgrade.
//
// Put reserves addresses through the store of
// github.com/containernetworking/plugins itself (backend/disk), so its
// files are the ones host-local writes, byte for byte. List reads every
// form the store has written over its history:
//
//   - "<container ID>\r\n<interface>", plugins v0.8.0 and later;
//   - "<container ID>\n<interface>", the first version of the change that
//     added the interface name (plugins PR #203, 2018), which no release
//     shipped but a build of the branch may have;
//   - "<container ID>" alone, before v0.8.0: listed with an empty IfName.
//
// host-local also keeps last_reserved_ip.<range index>, the last address
// it reserved in each range set of the configuration, where its next
// allocation starts looking, round-robin. That is not an allocation: List
// skips it, [Source.LastReserved] reads it, and Put updates it, as
// host-local's Reserve does, when the Source knows the address's range set
// ([WithRangeIndex]).
//
// # Locking
//
// host-local serialises the changes to its files with an exclusive
// flock(2) on the file "lock" in the network directory (plugins
// backend/disk/lock.go), which it holds while it allocates in one range
// set (allocator.Get: GetByID, then Reserve until one succeeds) or
// releases (allocator.Release). While a node's plugin binary is replaced,
// an old host-local binary and a new plugin built on phaseshift run side by
// side, so the new one takes the same lock whenever it touches host-local's
// files: each Source method takes it for its own duration, and
// [Source.Lock] holds it across several, until [Source.Unlock] or
// [Source.Close].
//
// An exec'd plugin takes both locks in one fixed order, and holds
// host-local's across its restore and its write, as host-local holds its
// lock from reading its files to reserving:
//
//  1. checkpoint.Open, which takes the checkpoint's lock (path+".lock");
//  2. Source.Lock, host-local's lock, before Store.Restore;
//  3. Restore, then the one write (Put, Delete, Update);
//  4. Store.Close releases the checkpoint, Source.Close host-local's lock
//     (in either order).
//
// Which locks a phase takes, per exec:
//
//	phase           checkpoint lock                  host-local's lock
//	0 legacy        only if it opens the checkpoint  Restore to the write
//	1 expand        Open to Close                    Restore to the write
//	2 migrate       Open to Close                    Restore to the write
//	3 contract      Open to Close                    only to cross-check legacy, if Config.Legacy is still set
//
// This cannot deadlock. A wait can only become a cycle if some process
// holds host-local's lock while it waits for a checkpoint lock. The old
// host-local binary takes no checkpoint lock at all, so it always finishes
// and releases its lock; every new binary, in any phase, takes the
// checkpoint's lock first. (An exec touches one network; a process that
// holds the locks of several networks takes those in one order too.)
// Taking the checkpoint's first is also the
// cheaper order: new execs queue on the checkpoint among themselves, and
// host-local's lock, the one old binaries wait for, is held only for the
// critical section. Without Lock, each operation still takes host-local's
// lock for itself, so no file is read half-written; but an old binary may
// then reserve an address between a Restore and a Put, which Put refuses
// with ErrReserved instead of overwriting.
//
// # Exec'd plugins and a legacy that lags
//
// A plugin that the runtime execs once per ADD and DEL restores at every
// exec, so every exec trusts its legacy source (phases 0 to 2). host-local's
// files are a safe legacy for it: Put is durable before it returns and the
// next exec reads the files under the same lock, so it sees every
// allocation at once. The container runtime's sandbox list over CRI (see
// package source/cri) is not: the runtime lists a sandbox only once the
// sandbox is ready, after its ADD returned, so an exec restoring from CRI
// misses the allocations of the ADDs just before it, and phase 1, which
// builds its state from legacy, forgets them and hands their addresses out
// again. CRI as a legacy needs a long-running daemon that restores once at
// start and keeps its state in memory (examples/ipam); migrate's
// Config.ShortLived refuses it in an exec'd process.
//
// # Caveats
//
//   - Linux (and the BSDs): the lock is flock(2). Windows names IPv6 files
//     with "_" for ":" and is not supported.
//   - A file from before plugins v0.8.0 holds no interface name, so it is
//     listed as Key{IfName: ""}, a key of its own. host-local's DEL releases
//     such a file for any interface name of its container; to do the same,
//     give migrate.Config a Match on (network, container ID), which is
//     right only where a container has one interface per network. A Put of
//     the real key for one of its addresses fails with ErrReserved until
//     the old key is deleted.
//   - Put reserves the new addresses before it removes the old ones. A
//     process that dies inside it, or a replaced file that cannot be
//     removed, leaves the key with its new addresses and some of its old
//     ones, more than it should (a leak, never an address given twice),
//     until the next Put or Delete of the key. A file whose creation was cut short is empty; List
//     reports it (ErrMalformed) and its address stays reserved until it is
//     removed, as with host-local.
//   - With WithRangeIndex, every Put that reserves an address moves
//     last_reserved_ip, also when a Store rewrites legacy from the
//     checkpoint at restore, and a Put that fails after a reservation does
//     not move it back. That only changes where the next round-robin search
//     starts. last_reserved_ip is not fsynced, as in host-local.
//   - Put fsyncs the files it creates and the directory; Delete the
//     directory. host-local fsyncs nothing, so after a power cut its last
//     reservations may be gone (with the containers that held them).
//   - List reads the whole directory, one small file per address, as
//     host-local's own GetByID does on every ADD; so do Put and Delete,
//     except under Lock after a List, when they reuse what it read (nobody
//     else may change the files meanwhile).
//   - flock locks belong to open files, not processes: two Sources of one
//     network in one process exclude each other like two processes, so a
//     process must not hold Lock on one while it uses the other.
//   - The lock is advisory: it keeps out host-local and this package, not
//     an operator editing the files by hand.
package hostlocal
