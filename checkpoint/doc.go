// Package checkpoint keeps a daemon's state in a durable, checksummed,
// locked JSON file that is never torn and never silently wrong.
//
// A [File] holds a [Snapshot]: a [Meta] header and a map of entries with
// any comparable key type (structs included) whose keys read back from
// JSON as themselves (see Keys), and any value type that encoding/json
// handles. [Open] takes the file's lock, [File.Load] reads and
// checks it (with its journal replayed), [File.Save] replaces it,
// [File.Commit] appends a few changed entries to a journal beside it (or,
// [WithoutJournal], replaces the file with them changed),
// [File.Quarantine] moves an unreadable file aside, and [File.Close]
// releases the lock. [Memory] is the same thing in memory, for
// tests; package checkpointtest injects faults into it.
//
// # The file
//
// The file is JSON that jq reads:
//
//	jq '.seq, .phase, (.entries | length)' /var/run/mydaemon/state.json
//
// With the journal (the default), though, the file holds the state as of
// its last compaction, and the commits since are in path+".journal": what
// a restart restores is the file with the journal replayed, which the
// phaseshift command (checkpoint/cmd/phaseshift) shows, reading both with
// this package's own Load:
//
//	phaseshift list /var/run/mydaemon/state.json | jq -c 'select(.key.containerID == "4f1c...")'
//	phaseshift inspect /var/run/mydaemon/state.json
//
// WithoutJournal, the file alone holds every commit.
//
// It records the file format version, the value schema version
// (WithSchema), the phase and version of the program that wrote it, the
// boot it was written in (WithBootID), a sequence number that every save
// increments, the time of the save, the entries as a list of {"key",
// "value"} objects one per line, and last a CRC-32C checksum over the exact
// bytes of everything before it. Any flipped byte and any truncation is
// reported as ErrCorrupt; so is a hand edit, because the checksum no longer
// matches. Next to the file live path+".prev", the previous good version
// of the file, kept so that one bad write or edit can be undone by hand
// (with the journal, the file before the last compaction; see Caveats),
// path+".journal" and path+".lock".
//
// # The journal
//
// By default ([WithJournal]; [WithoutJournal] turns it off), a commit
// appends one line to path+".journal" instead of replacing the file, and
// [File.Load] replays the lines over the file. A line is a JSON object that
// jq reads, one per commit:
//
//	{"journal":1,"base":7,"seq":8,"schema":1,"phase":"contract","writer":"ipamd v2","bootID":"...","savedAt":"...","changes":[{"key":K,"value":V},{"delete":{"key":K,"value":V}}],"crc32c":"1a2b3c4d"}
//
//	jq -c '{seq, changes: [.changes[] | .key // .delete.key]}' /var/run/mydaemon/state.json.journal
//
// base is the Seq of the file the line applies to and seq the Seq of the
// state it makes (a line a commit made while a compaction ran has the Seq
// of the compaction's new file as its base: see Guarantees); a put is the
// entry as the file would hold it, a delete the entry it removes; the
// checksum is CRC-32C over the bytes of the line before `,"crc32c"`. The file keeps its format, numbered 2 rather than 1
// so that a phaseshift built before the journal refuses it
// (ErrNewerSchema) instead of reading it without its journal. Load's Meta is the last
// line's (Phase, Writer, BootID, Seq, SavedAt), with the file's Format and
// Schema. The journal is folded into the file (compacted) by Save, by the
// first commit over a file written without the journal (format 1), after
// a Load that found anything but whole records that follow the file, after
// a schema change, a Load that dropped unknown fields
// (WithDropUnknownFields) or a failed write, and by a compaction once a
// commit grows it past a fifth of the file's size (at least 32 KiB). A
// File whose file is 64 KiB or more compacts in the background: that
// commit appends, as any other, and returns; a goroutine writes the new
// file while commits go on appending, and then installs it and the journal
// of the commits made meanwhile, holding the File's methods only for a few
// renames and the fsyncs of what was appended last (see Guarantees),
// whatever the file's size. No commit waits for the new file to be
// written. A smaller file (and a
// Memory, always) is compacted inline by the commit that would grow the
// journal past its bound, which then writes the whole file instead of
// appending. File.Journal says whether a compaction is running
// (Compacting) and why the last one failed (CompactionError): one that
// fails (a full disk) costs no commit anything; commits go on appending,
// and the next compaction starts once the journal has grown by another
// bound.
//
// # Kept copies
//
// Some files are set aside beside the checkpoint rather than removed, each
// named by why it was kept, with its journal, if it had one, under the same
// name + ".journal":
//
//   - path+".corrupt-<UTC time>": [File.Quarantine] moved aside a file
//     Load could not use (package migrate's Restore moves aside a
//     checkpoint it cannot use, as its documentation says). A phaseshift command older than the names below kept the
//     files its repairs replaced under this name too.
//   - path+".before-<verb>-<UTC time>": the phaseshift command's repair
//     <verb> (delete, restore-prev, restore-kept, repair-journal, reseal)
//     kept the file it replaced; phaseshift restore-kept puts such a copy
//     back.
//
// Each kind is bounded: a checkpoint keeps its 5 newest quarantined copies
// and its 5 newest copies kept by repairs. A File's Quarantine, and a
// repair once it is done, removes the oldest copies of its kind beyond 5,
// each file before its journal. A name that does not read as a kept copy's
// (its time in the format above) is never removed. (A Memory, for tests,
// keeps every copy it quarantined.)
//
// # Keys
//
// A key is stored as its JSON, and found again (by a later Commit, and by
// every restart) by decoding that JSON and comparing with ==. So every key
// Save and Commit write must decode from its own JSON to a key == to
// itself; one that would not is refused, before anything is written, with
// an *EncodeError matching ErrEncode that names the key's Go type and the
// field at fault, never the key. Keys that do not read back:
//
//   - strings that are not valid UTF-8 (JSON stores U+FFFD instead);
//   - a time.Time from time.Now() (JSON keeps neither the monotonic clock
//     reading nor the *time.Location; t.Round(0).UTC() does read back);
//   - a struct that differs from another only in unexported fields, or in
//     fields tagged json:"-" (JSON does not store them; the key reads
//     back with them at zero);
//   - a non-nil pointer (it reads back as a new pointer);
//   - an interface holding a type JSON decodes as another (an int reads
//     back as float64), or a map;
//   - a type whose MarshalJSON or MarshalText loses information.
//
// NaN and ±Inf cannot be encoded at all. The check costs a scan of the
// key's JSON for keys made of booleans, numbers and strings (in arrays and
// structs of exported fields), and a decode of the key's JSON for other key
// types.
//
// # Guarantees
//
//   - Atomic and durable saves. Save creates a temporary file in the same
//     directory (exclusively, named "."+base+".tmp-"+16 random hex
//     digits), writes, fsyncs and closes it, renames it over the
//     checkpoint and fsyncs the directory. Without the directory fsync a
//     power cut can bring the old file back after Save returned (renameio,
//     for one, stops after the rename). A crash or power cut at any instant
//     leaves the previous or the new checkpoint at the path, never a mix.
//     (The temporary file is this package's own rather than renameio's, so
//     that Open can tell its own leftovers from another checkpoint's by
//     name, and undo a rename whose directory fsync failed; renameio is not
//     a dependency.)
//   - Durable appends (the journal, the default). A commit that goes to
//     the journal
//     takes these steps: it checks that the lock is still this File's
//     (as a save does), that the checkpoint the journal follows is still
//     at its path as this File left it (the same inode, size and mtime,
//     and the same header and checksum line: a cp of .prev onto it, which
//     keeps the inode, is caught too) and that the journal is as long as
//     this File left it (if the file was replaced or written over, or the
//     journal is shorter or gone, the
//     commit writes the whole file instead; if the journal is longer,
//     another File appended to it, and the commit refuses with
//     ErrUnreadable until a Load); it opens the
//     journal for appending (creating it exclusively if there is none),
//     writes the line with one write(2), fsyncs the journal, closes it,
//     and, for a journal it created, fsyncs the directory. The commit is
//     acknowledged only then. If a step fails, the commit fails, the line
//     is cut back off the journal (best effort: truncate and fsync), and
//     the next commit writes the whole file. Commits run one at a time, so
//     a crash or power cut leaves at most the last line incomplete.
//   - Replay. Load reads the file, then the journal line by line: the last
//     line, if it is incomplete or fails its checksum, is a commit that was
//     never acknowledged: Load discards it, logs it and reports it
//     (File.Journal().Torn, a *TornJournalError; package migrate puts it
//     in Report.Errors) and goes on. A line follows the lines before it
//     when its seq is the next one and its base is the file's Seq, or the
//     base of the line before it, or the seq the lines before it reached
//     (the commits made while a compaction ran, after the lines up to its
//     snapshot, over the file a crash kept from being replaced by the
//     compaction's). Any other line that fails its checksum or its shape,
//     a first line whose base is above the file's Seq (an older file put
//     back, say .prev by hand), a line out of sequence, a journal whose
//     file is missing, is corruption: Load fails with
//     ErrCorrupt, Save and Commit refuse (ErrUnreadable), and Quarantine
//     moves the file and the journal aside together (path+".corrupt-<time>"
//     and the same name + ".journal"). The phaseshift command shows where
//     such a journal is damaged (phaseshift inspect) and can keep every
//     line before the damage (phaseshift repair-journal). Lines whose base is below the
//     file's Seq were folded into the file by a save that a crash stopped
//     before it removed the journal: they are skipped. The state the lines
//     replay to is held to the file's rules (schema upgrades, unknown
//     fields, WithValidate): an entry of it that cannot be read is a bad
//     entry whose older value in the file is not served either, while a
//     value a later line replaced or deleted is history and is not judged,
//     neither by WithValidate and the upgrades nor for fields the types
//     lack, in the file or in an earlier line, in a key or a value (a
//     delete removes its entry without upgrading the value it carries): a
//     journal loads when the same state compacted would.
//   - Compaction never replays a commit twice or loses one. A compaction
//     inline is a save (temporary file, fsync, rename, fsync of the
//     directory) of the whole state with the next Seq, after which the
//     journal is removed. Until the rename is durable, the old file and
//     the whole journal are there; after it, every line of the journal has
//     a base below the new file's Seq and is skipped, whether or not the
//     removal reached the disk. A compaction in the background takes a
//     snapshot of the state of the commit that set it off, seq H, and
//     writes it as a new file of Seq H (temporary file, written and
//     fsynced a piece of 256 KiB at a time, closed), while the commits
//     made meanwhile append lines of base H to the same journal; then,
//     holding the File's methods, it renames the file over the checkpoint
//     (the old one kept as .prev); it fsyncs the directory, and only then
//     replaces the journal by the lines since H (a temporary journal,
//     fsynced, the lines of the last commits added and fsynced holding the
//     File's methods, renamed over the journal, the directory fsynced;
//     removed when there are none). Until the rename is durable, the old
//     file and the whole journal are there, and the lines of base H follow
//     the lines up to H; after it, the lines before H are stale and those
//     of base H follow the new file, whichever journal a crash leaves. A
//     Save, Load, Quarantine or Close meanwhile abandons the compaction:
//     nothing is renamed into place once it is, and its temporary files are
//     removed (Close waits for that). Quarantine removes the file, fsyncs the directory,
//     then removes the journal: a crash between leaves a journal without
//     its file, which Load reports as corrupt, never a file without its
//     journal, which would load without the journal's commits.
//   - Schema changes. Lines are appended only over a file written with the
//     current schema and the journal's format, so every line has its
//     file's schema; a binary with a newer schema upgrades the lines on
//     replay as it does the file's entries (a delete carries the entry it
//     deletes, so the upgrade finds the key it leads to; a put or a delete
//     replaces or removes the entry its key had before, even when the
//     upgrade derives the new key from the value), and its first commit
//     rewrites the file in its own schema.
//   - Nothing unread is overwritten. After a Load that failed for any
//     reason but a missing file (ErrCorrupt, ErrNewerSchema, ErrOlderSchema,
//     ErrBadEntry, a read error), Save and Commit refuse (ErrUnreadable)
//     until a Load succeeds or Quarantine has moved the file to
//     path+".corrupt-<time>".
//   - No key is stored that cannot be found again (see Keys), and no
//     unencodable entry is half written: Save and Commit check and encode
//     every entry before the file is touched.
//   - A removed checkpoint comes back. When the file was removed under an
//     open File (an operator's rm, a cleanup script), the next Save or
//     Commit writes it again in full (a Commit: every entry the File holds,
//     with its changes), with the same protocol and durability, and logs
//     once that it had disappeared (with the journal, the commit also logs
//     that it fell back to writing the whole file); path+".prev", if it was
//     left, stays as it was until the save after.
//   - One owner. Open takes an exclusive flock(2) on path+".lock", a file
//     this package never renames or removes, and holds it until Close. A
//     second Open, from this process or another, waits until its context
//     is done and then fails with ErrLocked. The kernel releases the lock
//     when the owner dies, even by SIGKILL. If someone removes the lock
//     file (say, with the directory), every Save, Commit and Quarantine
//     notices before it writes: it creates the directory again (0700,
//     fsynced, as Open does), takes the lock at the path again and logs it,
//     or fails with ErrLocked if another File took it meanwhile; and it
//     refuses (ErrUnreadable) to replace a checkpoint another File wrote
//     meanwhile (or to append to, or fold away, a journal another File
//     appended to) until a Load has read it.
//   - Schema evolution. Entries written with an older schema are brought
//     to the current one by the WithUpgrade functions, in order; a gap in
//     the chain is an error at Open, not a surprise at Load. A file with a
//     newer schema (after a downgrade) fails with ErrNewerSchema and is
//     not touched. So does a file whose entries have fields the key or
//     value types do not have, at any depth (a newer binary added fields
//     without bumping the schema), unless WithDropUnknownFields says to
//     drop them; the upgrade functions' output is held to the same rule.
//     A file lacking fields the types have (written by an older binary)
//     loads, with those fields at their zero values.
//   - Cleanup. The next Open removes the temporary files that a crash
//     during a save of this checkpoint left, and nothing else: the names
//     read back to exactly one checkpoint, so another checkpoint's files
//     in the same directory, even one whose name begins with this one's,
//     are never touched.
//
// # Security
//
// The checkpoint, its .prev copy and its journal are created 0600 (see
// WithFileMode), the lock file 0600 whatever WithFileMode says, and a
// directory Open (or a save, after the directory was removed) creates is
// 0700, because values may hold secrets.
//
// Whoever may write the directory may put a file of their own, with a
// checksum that holds, in place of the checkpoint, so the directory is
// checked: Open (and a save that creates it again) refuses, with ErrUnsafe
// naming the fix (chmod go-w DIR), a directory that another user than the
// process's or root owns, or that its group or others may write unless it
// is sticky. The directories above it are not checked (Open logs a
// warning for one others may write).
//
// Every file this package opens (the checkpoint, its journal, the lock
// file, the command's reads of .prev and kept copies) is opened without
// following a symlink and without blocking (O_NOFOLLOW|O_NONBLOCK: a FIFO
// or a device at a name cannot hang Load, which no context can cancel in
// open(2)), and checked with fstat before anything is read or written: a
// regular file owned by the process's user or root, with no hard link from
// outside its directory (the write protocol links .prev and kept copies
// within it). Anything else is refused with ErrUnsafe, naming the path,
// what was there and the fix. The lock file is created with O_EXCL; an
// existing one is used only with no other name (so it is never truncated
// through a hard link), and made 0600 (flock needs only read access: a
// lock file others can read is a lock others can hold). ErrLocked names
// the holder the kernel shows in /proc/locks, not only the PID the lock
// file records, which its writer chose. Temporary files are created with
// O_EXCL|O_NOFOLLOW, and saves replace the checkpoint by rename, which
// replaces a symlink instead of following it: a symlink planted at any
// name this package uses is reported or replaced, never followed.
//
// A seq at or above 2^63, in the file or a journal record, is ErrCorrupt:
// no writer counts that far, and a save after 2^64-1 would wrap to 0.
//
// Errors and logs name paths, keys (as the file holds them), Go types,
// field names and counts, never a value. The texts of encoding/json's
// errors and of (Un)MarshalJSON and (Un)MarshalText methods are never
// included, since they quote what they were given: an error says what
// kind of problem it was (a JSON string where a number is expected, a
// json.Number that is not a number, a failing MarshalJSON of type T) and
// keeps the original reachable with errors.As and Unwrap (EncodeError.Err,
// EntryError.Err), for a caller who chooses to look. A key that is refused
// because it would not read back is not shown either, only its type. The
// one exception is an UpgradeFunc's own error, which is included as
// returned: write it without values.
//
// # Caveats
//
//   - Durability assumes the file system and disk honour fsync, and that
//     rename(2) is atomic (true of ext4, xfs and tmpfs on Linux).
//   - The lock is advisory: it keeps out other users of this package, not a
//     program that writes the file directly.
//   - Entry order in the file is not meaningful and changes as entries are
//     deleted.
//   - Between the removal of the lock file and this File's next save, a
//     second Open of the same path succeeds; the save then finds out (see
//     One owner) but cannot undo what the other File served meanwhile.
//   - Temporary files left by a crash under an earlier version of this
//     package (named "."+base+digits by renameio) are not removed: such a
//     name cannot be told from another checkpoint's live temporary file.
//   - Unknown fields are found by encoding/json: inside a type with its
//     own UnmarshalJSON or UnmarshalText, that method decides.
//   - A File serialises its own methods; it is not a database. With the
//     journal (the default) a commit costs one fsync'd append; a
//     compaction in the background costs a commit that arrives while it
//     installs its file and its journal a wait of a few renames and up to
//     three fsyncs, and its writes share the disk with the commits'
//     appends; the commit that
//     compacts a file under 64 KiB inline pays a whole save of it. A Load
//     replays up to a fifth of the file's size of journal, and more by
//     what commits appended while a compaction ran, or since one failed.
//     WithoutJournal, every commit writes the whole file (Commit only
//     saves encoding work), so its cost grows with the number of entries.
//   - A phaseshift released before compaction ran in the background reads
//     every journal this one leaves but one: a journal a crash left in
//     the middle of a compaction in the background (commits made while it
//     ran, over the older file), which it refuses (ErrCorrupt: a line
//     whose base is above the file's Seq) rather than load without those
//     commits. A run of this version loads it and compacts it.
//   - The journal trusts its last line least: bit rot in the last
//     acknowledged line looks like a torn write and is discarded (and
//     reported), not refused.
//   - A journal is never written beside a file another binary wrote
//     without it (format 1): the first commit over such a file rewrites
//     it as format 2. Every released phaseshift reads format 2 and its
//     journal (the journal shipped, on by default, with the first
//     release); a build from before the journal refuses a format-2 file
//     (ErrNewerSchema) rather than ignore the journal, so handing the
//     checkpoint to one needs a run of this version WithoutJournal first,
//     which folds the journal into a format-1 file at its first save.
//   - Programs that read the file directly, rather than through Load or
//     the phaseshift command, miss the journal's commits: open the
//     checkpoint WithoutJournal for them.
//   - Load returns the schema the file was written with in Meta.Schema
//     even when it upgraded the entries.
//   - .prev is never used automatically: it lacks the last write, so using
//     it silently would lose acknowledged state. Restore it by hand when
//     that is the lesser evil, with the phaseshift command
//     (checkpoint/cmd/phaseshift: phaseshift restore-prev path), which takes
//     the lock and keeps the replaced file, rather than cp. With the
//     journal (the default) .prev is the file before the last compaction
//     or Save, and lacks every commit since; restore-prev moves the
//     journal aside with the file it replaces, where a cp would leave a
//     journal that follows another file (ErrCorrupt), and marks the file
//     it puts back behind (Meta.Behind), so that package migrate's phase 3
//     refuses it and phases 1 and 2 rebuild it from legacy.
package checkpoint
