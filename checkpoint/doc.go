// Package checkpoint keeps a daemon's state in a durable, checksummed, locked
// JSON file that is never torn and never silently wrong.
//
// A [File] holds a [Snapshot]: a [Meta] header and a map of entries with any
// comparable key type (structs too) whose keys read back from JSON as
// themselves (see Keys), and any value type that encoding/json handles. [Open]
// takes the file's lock, [File.Load] reads and checks it (its journal
// replayed), [File.Save] replaces it, [File.Commit] appends changed entries to
// the journal (or, [WithoutJournal], rewrites the file), [File.Quarantine]
// moves an unreadable file aside, [File.Close] releases the lock; [Memory]
// does the same in memory, for tests (package checkpointtest injects faults).
//
// # The file
//
// The file is JSON that jq reads. It records its format (2 with the journal, 1
// WithoutJournal), the value schema ([WithSchema]), the phase and version of
// the program that wrote it, the boot it was written in ([WithBootID]), a
// sequence number (Seq) that every save increments, the time of the save, the
// entries as a list of {"key", "value"} objects one per line, and last a
// CRC-32C checksum over the exact bytes of everything before it: any flipped
// byte, truncation or hand edit is reported as [ErrCorrupt]. Beside it live
// path+".journal", path+".lock" and path+".prev", the previous good version,
// kept so that one bad write or edit can be undone by hand (see Caveats). With
// the journal (the default) the file holds the state of its last compaction
// and the journal the commits since, which the phaseshift command
// (cmd/phaseshift) shows replayed, with this package's Load. WithoutJournal,
// the file alone holds every commit, for programs that read it directly.
//
//	jq '.seq, .phase, (.entries | length)' /var/run/mydaemon/state.json
//	phaseshift list /var/run/mydaemon/state.json | jq -c 'select(.key.containerID == "4f1c...")'
//
// # The journal
//
// With [WithJournal] (the default) a commit appends to path+".journal",
// instead of replacing the file, one line that jq reads:
//
//	{"journal":1,"base":7,"seq":8,"schema":1,"phase":"contract","writer":"ipamd v2","bootID":"...","savedAt":"...","changes":[{"key":K,"value":V},{"delete":{"key":K,"value":V}}],"crc32c":"1a2b3c4d"}
//	jq -c '{seq, changes: [.changes[] | .key // .delete.key]}' /var/run/mydaemon/state.json.journal
//
// base is the Seq of the file the line applies to, seq the Seq of the state it
// makes; a put is the entry as the file would hold it, a delete the entry it
// removes; crc32c is CRC-32C over the bytes of the line before `,"crc32c"`. A
// line follows the lines before it when its seq is the next one and its base
// is the file's Seq, the base of the line before it, or the seq the lines
// before it reached (a commit made during a compaction has the new file's Seq
// as its base). Load replays the lines that follow; its Meta is the last
// line's (Phase, Writer, BootID, Seq, SavedAt) with the file's Format and
// Schema. Crash rules in brief: a last line incomplete or failing its checksum
// is taken for a commit a crash cut short and discarded; lines of a base below
// the file's Seq, already in it, are skipped; any other bad line, one that
// does not follow (a first line of a base above the file's Seq: an older file
// put back) and a journal without its file are corruption.
//
// The journal is folded into the file (compacted) by Save, by the first commit
// over a format-1 file (so no journal follows one), after a schema change, a
// failed write, or a Load that found anything but whole lines that follow the
// file or dropped unknown fields ([WithDropUnknownFields]), and once a commit
// grows it past a fifth of the file's size (at least 32 KiB): inline, by that
// commit writing the whole file, under 64 KiB (in a Memory, always); in the
// background, which no commit waits for, from 64 KiB. [File.Journal] says
// whether one runs (Compacting) and why the last failed (CompactionError); a
// failure (a full disk) costs no commit anything: commits go on appending, and
// the next starts once the journal has grown by another bound.
//
// # Kept copies
//
// Files set aside beside the checkpoint, each with its journal under the same
// name + ".journal", are named by why: path+".corrupt-<UTC time>" by
// [File.Quarantine] (called by package migrate's Restore where its rules say),
// a file Load could not use; path+".before-<verb>-<UTC time>" by the
// phaseshift command's repair <verb> (delete, restore-prev, restore-kept,
// repair-journal, reseal), the file it replaced, which restore-kept puts back.
// Quarantine, and a repair once done, removes the oldest copies of its kind
// beyond the 5 newest, each file before its journal, never a name that does
// not read as a kept copy's; a Memory keeps every copy it quarantined.
// Quarantine removes the file, fsyncs the directory, then removes the journal:
// a crash between leaves a journal without its file, never the file alone.
//
// # Keys
//
// A key is stored as its JSON and found again (by a later Commit, and by every
// restart) by decoding that JSON and comparing with ==. So Save and Commit
// refuse, before anything is written, a key that does not decode from its JSON
// to a key == to itself, with an *[EncodeError] matching [ErrEncode] that
// names its Go type and the field at fault, never the key. Keys that do not
// read back: a string that is not valid UTF-8 (JSON stores U+FFFD); a
// time.Time from time.Now() (JSON keeps neither the monotonic reading nor the
// *time.Location; t.Round(0).UTC() reads back); a struct that differs from
// another only in unexported or json:"-" fields; a non-nil pointer; an
// interface holding a type JSON decodes as another (an int reads back as
// float64), or a map; a type whose MarshalJSON or MarshalText loses
// information. NaN and ±Inf cannot be encoded. The check scans the key's JSON,
// or decodes it for keys not made of booleans, numbers and strings.
//
// # Guarantees
//
//   - Atomic and durable saves. Save creates a temporary file in the same
//     directory (exclusively, "."+base+".tmp-"+16 random hex digits), writes,
//     fsyncs and closes it, renames it over the checkpoint and fsyncs the
//     directory, without which (renameio stops at the rename) a power cut can
//     bring the old file back after Save returned. A crash or power cut at any
//     instant leaves the previous or the new checkpoint at the path.
//   - Durable appends. A commit is acknowledged only once its line is written
//     (one write(2)) and fsynced, with the directory for a journal it created.
//     A failed step fails the commit, cuts the line back off (best effort:
//     truncate, fsync) and makes the next commit write the whole file, as does
//     a checkpoint not as this File left it (inode, size, mtime, header and
//     checksum line: a cp of .prev onto it is caught) or a journal shorter; a
//     journal longer (another File appended to it) makes it refuse with
//     [ErrUnreadable] until a Load. Commits run one at a time, so a crash or
//     power cut leaves at most the last line incomplete.
//   - Replay. Load logs and reports a torn last line (File.Journal().Torn, a
//     *[TornJournalError]; migrate puts it in Report.Errors) and goes on; on
//     corruption it fails (ErrCorrupt). The replayed state is held to the
//     file's rules (upgrades, unknown fields, [WithValidate]) as the same
//     state compacted would be: what later lines replace or delete is not
//     judged.
//   - Compaction never replays a commit twice or loses one, whatever a crash
//     leaves: the new file (of the next Seq inline; in the background, of the
//     Seq of the commit that set it off, written off the File's methods,
//     fsynced 256 KiB at a time) is renamed into place, the old one kept as
//     .prev, and the directory fsynced before the journal is removed or
//     replaced by the lines since. A Save, Load, Quarantine or Close meanwhile
//     abandons it: nothing is renamed into place after; its temporary files
//     are removed (Close waits).
//   - Schema changes. Lines are appended only over a file of the current
//     schema and format 2; a newer schema upgrades lines on replay as the
//     file's entries (a delete carries its entry, so a put or delete replaces
//     or removes the entry its key had, even when the upgrade derives the key
//     from the value), and its first commit rewrites the file in its schema.
//   - Nothing unread is overwritten. After a Load that failed for any reason
//     but a missing file ([ErrCorrupt], [ErrNewerSchema], [ErrTypeMismatch],
//     [ErrOlderSchema], [ErrBadEntry], a read error), Save and Commit refuse (ErrUnreadable)
//     until a Load succeeds or Quarantine has moved the file aside.
//   - No key is stored that cannot be found again (see Keys), no unencodable
//     entry half written: Save and Commit check and encode every entry first.
//   - A removed checkpoint comes back. When the file was removed under an open
//     File, the next Save or Commit writes it in full again (a Commit: every
//     entry the File holds, with its changes), as durably, and logs once that
//     it had gone; a .prev left stays until the save after.
//   - One owner. Open takes an exclusive flock(2) on path+".lock", a file this
//     package never renames or removes, held until Close; a second Open, from
//     this process or another, waits until its context is done and fails with
//     [ErrLocked]. The kernel releases the lock when the owner dies, even by
//     SIGKILL. If the lock file is removed (with the directory, say), every
//     Save, Commit and Quarantine notices before it writes: it creates the
//     directory again (0700, fsynced) and takes the lock again, logging it, or
//     fails with ErrLocked if another File took it; and until a Load, it
//     refuses (ErrUnreadable) to replace a checkpoint, or append to or fold
//     away a journal, that another File wrote meanwhile.
//   - Schema evolution. Entries of an older schema are brought to the current
//     one by the [WithUpgrade] functions, in order; a gap in the chain is an
//     error at Open. A file of a newer schema (its header says so) fails with
//     ErrNewerSchema and is not touched. One whose entries (or the upgrades'
//     output) have fields the key or value types lack, at any depth, fails
//     with [ErrTypeMismatch] and is not touched either: the error names the
//     field and the type that lacks it and the fixes that lose nothing;
//     WithDropUnknownFields, which drops the fields for good, is the last of
//     them (inside a type with its own UnmarshalJSON or UnmarshalText, that
//     method decides). Fields the file lacks load as zero; Load's
//     Meta.Schema stays the file's.
//   - Cleanup. The next Open removes the temporary files (named as above) a
//     crash during a save of this checkpoint left, and nothing else, not even
//     those of a checkpoint whose name begins with this one's.
//
// # Security
//
// Files are created 0600 ([WithFileMode]; the lock file 0600 regardless: flock
// needs only read access), directories it creates 0700. Open refuses with
// [ErrUnsafe], naming the fix, a directory another user than the process's or
// root owns, or that group or others may write unless it is sticky. Every file
// is opened O_NOFOLLOW|O_NONBLOCK and must be a regular file of the process's
// user or root with no hard link from outside its directory; a symlink is
// reported or replaced, never followed. A seq at or above 2^63 is ErrCorrupt.
// Errors and logs hold no value, nor the text of encoding/json's or
// (Un)Marshal methods' errors (wrapped by [EntryError] and EncodeError), but
// an [UpgradeFunc]'s: write it without values. See docs/security.md.
//
// # Caveats
//
//   - Durability assumes the file system and disk honour fsync and that
//     rename(2) is atomic (true of ext4, xfs and tmpfs on Linux).
//   - The lock is advisory: it keeps out other users of this package, not a
//     program that writes the file directly. Between the removal of the lock
//     file and the next save, a second Open succeeds: the save finds out (One
//     owner) but cannot undo what the other File served meanwhile.
//   - Entry order in the file is not meaningful and changes with deletes.
//   - A File serialises its methods; it is not a database. A background
//     compaction's writes share the disk; a commit that meets its install
//     waits a few renames and up to three fsyncs; one that compacts inline, or
//     WithoutJournal, pays a whole save, growing with the entries. A Load
//     replays up to the bound of journal, more by what was appended during a
//     compaction or after one failed.
//   - Bit rot in the last acknowledged line of a journal looks like a torn
//     write and is discarded (and reported), not refused.
//   - An earlier release may refuse a journal this one left: see CHANGELOG.md.
//   - .prev is never used automatically: it lacks the last write (with the
//     journal, all commits since the last compaction or Save). Put it back
//     with phaseshift restore-prev, not cp (which leaves a journal that
//     follows another file: ErrCorrupt): it keeps the file it replaces, and
//     its journal, and marks .prev behind ([Meta].Behind), which migrate's
//     phase 3 refuses.
package checkpoint
