package migrate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap/zapcore"
)

// Sides names the sides a restore built the served state from.
type Sides string

// The sides, in Report.ReadFrom and Shadow.Side.
const (
	ReadLegacy              Sides = "legacy"
	ReadCheckpoint          Sides = "checkpoint"
	ReadCheckpointAndLegacy Sides = "checkpoint+legacy"
	ReadNothing             Sides = "nothing" // neither side could be used, or counts (see Report.ReadFrom)
)

// Report says what Restore did: where the served state came from, what it
// reconciled, what it found stale or unreadable and what it repaired. Key
// lists are in no particular order.
type Report[K comparable] struct {
	Phase Phase
	// ReadFrom is the sides restore built the served state from: legacy in
	// phase 0; the checkpoint and legacy in phases 1 and 2; the checkpoint
	// in phase 3 (and legacy too when it backfilled, rule 17) and when
	// legacy is stale. A side is left out when it could
	// not be used (a checkpoint missing, moved aside or from an earlier
	// boot) and, for a legacy that does not survive a restart
	// (Config.VolatileLegacy, which phase 0 also reads through when it has a
	// checkpoint), when it held nothing. ReadNothing when neither side
	// counts; "" when Restore failed. A side read only to compare is in
	// Shadow.
	ReadFrom Sides

	Restored       int // entries served
	FromCheckpoint int // of those, served with the checkpoint's key and value
	FromLegacy     int // of those, served with legacy's (Backfilled included)

	// How the two sides were reconciled, by the key served (or, for the
	// entries not served, the key the checkpoint had).
	Backfilled []K // only legacy had them: served (phase 2; phase 3, rule 17; rule 11; not phase 1, where legacy is the basis)
	Dropped    []K // only the checkpoint had them: not served, because legacy decides which entries exist
	Orphaned   []K // only the checkpoint had them: served, because legacy could have missed them
	Pruned     []K // only the checkpoint had them: not served (Config.PruneOrphans)
	Diverged   []K // both had them, with values Config.Equal calls different: Config.Merge chose

	// Shadow is the comparison with a side that was read only to compare
	// (the checkpoint in phase 0 with Config.Verify, legacy in phase 3);
	// nil when none was.
	Shadow *Shadow[K]

	Stale string // why the checkpoint was not trusted as it was found; "" if it was
	// Behind is why the checkpoint, as this restore left it, may lack what
	// legacy holds ("" when it does not): this phase-0 run, or a listing
	// that was not complete. Phase 3 refuses such a checkpoint until a run
	// that reads legacy in full clears it; Stale says what restore found,
	// Behind what it left.
	Behind       string
	LegacyStale  string // why legacy was not trusted; "" if it was
	LegacyWrites int    // writes restore made to bring an explicit legacy in line with what is served
	Quarantined  string // where an unreadable checkpoint was moved; "" if none

	CheckpointRewritten bool // the checkpoint was saved before Restore returned
	// Errors is what could not be read, and was skipped or set aside; it
	// includes a torn last record of the checkpoint's journal that Load
	// discarded (a *checkpoint.TornJournalError, a commit a crash cut
	// short), which stops nothing, Strict or not.
	Errors []error
}

// Shadow compares the served state with a side that was read only to
// compare.
type Shadow[K comparable] struct {
	Side       Sides // the side compared: ReadLegacy or ReadCheckpoint
	OnlyShadow []K   // entries only that side has
	OnlyServed []K   // served entries that side lacks
	Diverged   []K   // served entries that side holds with another value
}

// Agrees reports whether the shadow side holds exactly what is served.
func (s *Shadow[K]) Agrees() bool {
	return len(s.OnlyShadow)+len(s.OnlyServed)+len(s.Diverged) == 0
}

// reportItem is one thing a report says: a count, a key list, a text or a
// flag. String and MarshalLogObject both read the same items.
type reportItem[K comparable] struct {
	name string // the log's key
	say  string // String's words; "" leaves the item out of String
	n    int    // a count
	keys []K    // a key list (its length is the count)
	text string // a text
	list bool   // keys is the item
	flag bool   // a set flag: only its name is shown
	// named: String shows the keys too, as JSON, for an operator to act
	// on (the orphaned and diverged entries the fleet gate blocks on).
	named bool
}

// items lists what r says, in the order String shows it; zero values are
// left out.
func (r Report[K]) items() []reportItem[K] {
	it := []reportItem[K]{
		{name: "fromCheckpoint", n: r.FromCheckpoint},
		{name: "fromLegacy", n: r.FromLegacy},
		{name: "backfilled", say: "backfilled", keys: r.Backfilled, list: true},
		{name: "dropped", say: "dropped", keys: r.Dropped, list: true},
		{name: "orphaned", say: "orphaned", keys: r.Orphaned, list: true, named: true},
		{name: "pruned", say: "pruned", keys: r.Pruned, list: true},
		{name: "diverged", say: "diverged", keys: r.Diverged, list: true, named: true},
	}
	if sh := r.Shadow; sh != nil {
		agrees := "agrees"
		if !sh.Agrees() {
			agrees = "differs"
		}
		it = append(it,
			reportItem[K]{name: "shadow", say: string(sh.Side), text: agrees},
			reportItem[K]{name: "shadowOnly", say: "only in " + string(sh.Side), keys: sh.OnlyShadow, list: true},
			reportItem[K]{name: "shadowLacks", say: "not in " + string(sh.Side), keys: sh.OnlyServed, list: true},
			reportItem[K]{name: "shadowDiverged", say: "other values in " + string(sh.Side), keys: sh.Diverged, list: true},
		)
	}
	return append(it,
		reportItem[K]{name: "checkpointRewritten", say: "checkpoint rewritten", flag: r.CheckpointRewritten},
		reportItem[K]{name: "stale", say: "stale checkpoint", text: r.Stale},
		reportItem[K]{name: "behind", say: "left behind legacy", text: r.Behind},
		reportItem[K]{name: "legacyStale", say: "stale legacy", text: r.LegacyStale},
		reportItem[K]{name: "legacyWrites", say: "legacy writes", n: r.LegacyWrites},
		reportItem[K]{name: "quarantined", say: "quarantined to", text: r.Quarantined},
	)
}

func (it reportItem[K]) zero() bool {
	return it.n == 0 && len(it.keys) == 0 && it.text == "" && !it.flag
}

// String returns the report on one line. The keys of the orphaned and
// diverged entries follow their counts, as the JSON the phaseshift command
// takes (encoding/json's, sorted; the first logKeys of each, then how many
// more): "orphaned 1 [{"network":"n","containerID":"c1"}]".
func (r Report[K]) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %d (%s): ", int(r.Phase), r.Phase)
	if r.ReadFrom == "" {
		b.WriteString("not restored")
	} else {
		fmt.Fprintf(&b, "read %s, restored %d (%d from checkpoint, %d from legacy)", r.ReadFrom, r.Restored, r.FromCheckpoint, r.FromLegacy)
	}
	for _, it := range r.items() {
		switch {
		case it.zero() || it.say == "":
		case it.flag:
			fmt.Fprintf(&b, ", %s", it.say)
		case it.text != "" && it.name == "quarantined":
			fmt.Fprintf(&b, ", %s %s", it.say, it.text)
		case it.text != "":
			fmt.Fprintf(&b, ", %s: %s", it.say, it.text)
		case it.list && it.named:
			fmt.Fprintf(&b, ", %s %d %s", it.say, len(it.keys), jsonKeys(it.keys))
		case it.list:
			fmt.Fprintf(&b, ", %s %d", it.say, len(it.keys))
		default:
			fmt.Fprintf(&b, ", %s %d", it.say, it.n)
		}
	}
	switch len(r.Errors) {
	case 0:
	case 1:
		fmt.Fprintf(&b, ", 1 error: %v", r.Errors[0])
	default:
		fmt.Fprintf(&b, ", %d errors, first: %v", len(r.Errors), r.Errors[0])
	}
	return b.String()
}

// logKeys is how many keys of each list the log and String show.
const logKeys = 10

// keyText returns k as the JSON the phaseshift command takes, for errors
// and the report: keys are shown, values never are.
func keyText[K comparable](k K) string {
	b, err := json.Marshal(k)
	if err != nil {
		return "(a key that does not encode as JSON)"
	}
	return string(b)
}

// jsonKeys returns the first logKeys of keys, as JSON, sorted, in
// brackets, and how many more there are.
func jsonKeys[K comparable](keys []K) string {
	texts := make([]string, 0, len(keys))
	for _, k := range keys {
		texts = append(texts, keyText(k))
	}
	slices.Sort(texts)
	more := ""
	if len(texts) > logKeys {
		more = fmt.Sprintf(" and %d more", len(texts)-logKeys)
		texts = texts[:logKeys]
	}
	return "[" + strings.Join(texts, " ") + "]" + more
}

// MarshalLogObject logs the report with zap: counts, texts and the first
// keys of each list (logKeys), never values. Keys are logged as
// themselves (zap's reflection): a JSON or console encoder writes them as
// encoding/json does, the JSON the phaseshift command takes.
func (r Report[K]) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("phase", int(r.Phase))
	enc.AddString("readFrom", string(r.ReadFrom))
	enc.AddInt("restored", r.Restored)
	for _, it := range r.items() {
		switch {
		case it.zero():
		case it.flag:
			enc.AddBool(it.name, true)
		case it.text != "":
			enc.AddString(it.name, it.text)
		case it.list:
			enc.AddInt(it.name, len(it.keys))
			if err := enc.AddArray(it.name+"Keys", keyList[K](it.keys[:min(len(it.keys), logKeys)])); err != nil {
				return err
			}
		default:
			enc.AddInt(it.name, it.n)
		}
	}
	if len(r.Errors) > 0 {
		return enc.AddArray("errors", errorList(r.Errors))
	}
	return nil
}

type keyList[K comparable] []K

func (l keyList[K]) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, k := range l {
		if err := enc.AppendReflected(k); err != nil {
			return err
		}
	}
	return nil
}

type errorList []error

func (l errorList) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, err := range l {
		enc.AppendString(err.Error())
	}
	return nil
}
