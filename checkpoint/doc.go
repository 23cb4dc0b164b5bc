// Package checkpoint keeps a daemon's state in a durable, checksummed,
// locked JSON file that is never torn and never silently wrong.
//
// A [File] holds a [Snapshot]: a [Meta] header and a map of entries with
// any comparable key type (structs included) and any value type that
// encoding/json handles. [Open] takes the file's lock, [File.Load] reads and
// checks it, [File.Save] replaces it, [File.Commit] replaces it with a few
// entries changed, [File.Quarantine] moves an unreadable file aside, and
// [File.Close] releases the lock. [Memory] is the same thing in memory, with
// fault injection, for tests.
//
// # The file
//
// The file is JSON an operator can read with jq:
//
//	jq '.seq, .phase, (.entries | length)' /var/run/mydaemon/state.json
//	jq '.entries[] | select(.key.containerID == "4f1c...")' /var/run/mydaemon/state.json
//
// It records the file format version, the value schema version
// (WithSchema), the phase and version of the program that wrote it, the
// boot it was written in (WithBootID), a sequence number that every save
// increments, the time of the save, the entries as a list of {"key",
// "value"} objects one per line, and last a CRC-32C checksum over the exact
// bytes of everything before it. Any flipped byte and any truncation is
// reported as ErrCorrupt; so is a hand edit, because the checksum no longer
// matches. Next to the file live path+".prev", the previous good version,
// kept so that one bad write or edit can be undone by hand, and
// path+".lock".
//
// # Guarantees
//
//   - Atomic and durable saves. Save writes a temporary file in the same
//     directory, fsyncs and closes it, renames it over the checkpoint and
//     fsyncs the directory. renameio (used to create the temporary file)
//     stops after the rename; without the directory fsync a power cut can
//     bring the old file back after Save returned, so this package adds it.
//     A crash or power cut at any instant leaves the previous or the new
//     checkpoint at the path, never a mix.
//   - Nothing unreadable is overwritten. After a Load that failed for any
//     reason but a missing file, Save and Commit refuse (ErrUnreadable) until
//     Quarantine has moved the file to path+".corrupt-<time>".
//   - One owner. Open takes an exclusive flock(2) on path+".lock", a file
//     that is never renamed or removed, and holds it until Close. A second
//     Open, from this process or another, waits until its context is done
//     and then fails with ErrLocked. The kernel releases the lock when the
//     owner dies, even by SIGKILL.
//   - Schema evolution. Entries written with an older schema are brought
//     to the current one by the WithUpgrade functions, in order; a gap in
//     the chain is an error at Open, not a surprise at Load. A file with a
//     newer schema (after a downgrade) fails with ErrNewerSchema and is
//     not touched.
//   - Cleanup. Temporary files left by a crash during Save are removed by
//     the next Open.
//
// # Security
//
// The checkpoint, its .prev copy and the lock file are created 0600 (see
// WithFileMode), and a directory Open creates is 0700, because values may
// hold secrets. Reads and the lock open their files with O_NOFOLLOW, and
// saves replace the checkpoint by rename, which replaces a symlink instead
// of following it: a symlink planted at the checkpoint's path is reported,
// never followed. The directory itself is trusted: its permissions are
// not checked, and it must not be writable by other users. Errors and logs
// name paths and keys, never values.
//
// # Caveats
//
//   - Durability assumes the file system and disk honour fsync, and that
//     rename(2) is atomic (true of ext4, xfs and tmpfs on Linux).
//   - The lock is advisory: it keeps out other users of this package, not a
//     program that writes the file directly.
//   - Entry order in the file is not meaningful and changes as entries are
//     deleted.
//   - A File serialises its own methods; it is not a database. Every save
//     writes the whole file (Commit only saves encoding work), so the cost
//     of a save grows with the number of entries.
//   - Load returns the schema the file was written with in Meta.Schema
//     even when it upgraded the entries.
//   - .prev is never used automatically: it lacks the last write, so using
//     it silently would lose acknowledged state. Restore it by hand
//     (cp path.prev path) when that is the lesser evil.
package checkpoint
