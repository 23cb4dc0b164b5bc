package migrate

import (
	"fmt"
	"strings"

	"go.uber.org/zap"
)

// Where a restore read from, in Report.ReadFrom.
const (
	ReadLegacy              = "legacy"
	ReadCheckpoint          = "checkpoint"
	ReadCheckpointAndLegacy = "checkpoint+legacy"
	ReadNothing             = "nothing" // phase 3 starting fresh
)

// Report says what Restore did: where the served state came from, what it
// reconciled, what it found stale or unreadable and what it repaired. Key
// lists are in no particular order.
type Report[K comparable] struct {
	Phase    Phase
	ReadFrom string // ReadLegacy, ReadCheckpoint, ReadCheckpointAndLegacy or ReadNothing

	Restored       int // entries served after restore
	FromCheckpoint int // of those, taken from the checkpoint
	FromLegacy     int // of those, taken from legacy (Backfilled included)

	Backfilled []K // phase 2: taken from legacy because the checkpoint lacked them
	Orphaned   []K // in the checkpoint only, kept
	Pruned     []K // in the checkpoint only, dropped (Config.PruneOrphans)
	Diverged   []K // on both sides with different values

	// Shadow is the side read only to compare with what is served: the
	// checkpoint in phase 1 (and phase 0 with Verify), legacy in phase 3.
	// ShadowOnly lists entries only it has; Orphaned lists those only the
	// served side has when that side is the checkpoint.
	Shadow     string
	ShadowOnly []K
	ServedOnly []K

	CheckpointRewritten bool   // the checkpoint was saved before Restore returned
	Stale               string // why the checkpoint was not trusted; "" if it was
	StaleLegacy         string // why legacy was not trusted; "" if it was
	LegacyHealed        int    // writes made to bring an explicit legacy in line with what is served
	Quarantined         string // where an unreadable checkpoint was moved; "" if none
	Errors              []error
}

// String returns the report on one line.
func (r Report[K]) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %d (%s): read %s, restored %d (%d from checkpoint, %d from legacy)",
		int(r.Phase), r.Phase, r.ReadFrom, r.Restored, r.FromCheckpoint, r.FromLegacy)
	count := func(name string, n int) {
		if n > 0 {
			fmt.Fprintf(&b, ", %s %d", name, n)
		}
	}
	count("backfilled", len(r.Backfilled))
	count("orphaned", len(r.Orphaned))
	count("pruned", len(r.Pruned))
	count("diverged", len(r.Diverged))
	if r.Shadow != "" {
		if len(r.ShadowOnly)+len(r.ServedOnly) == 0 {
			fmt.Fprintf(&b, ", %s agrees", r.Shadow)
		} else {
			fmt.Fprintf(&b, ", %s differs: %d entries only there, %d only served", r.Shadow, len(r.ShadowOnly), len(r.ServedOnly))
		}
	}
	if r.CheckpointRewritten {
		b.WriteString(", checkpoint rewritten")
	}
	if r.Stale != "" {
		fmt.Fprintf(&b, ", stale checkpoint: %s", r.Stale)
	}
	if r.StaleLegacy != "" {
		fmt.Fprintf(&b, ", stale legacy: %s (%d writes to heal it)", r.StaleLegacy, r.LegacyHealed)
	} else if r.LegacyHealed > 0 {
		fmt.Fprintf(&b, ", legacy brought in line (%d writes)", r.LegacyHealed)
	}
	if r.Quarantined != "" {
		fmt.Fprintf(&b, ", quarantined to %s", r.Quarantined)
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

// logKeys is how many keys of each list the log shows.
const logKeys = 10

func (r Report[K]) fields() []zap.Field {
	keys := func(name string, ks []K) []zap.Field {
		if len(ks) == 0 {
			return nil
		}
		shown := make([]string, 0, min(len(ks), logKeys))
		for _, k := range ks[:min(len(ks), logKeys)] {
			shown = append(shown, fmt.Sprint(k))
		}
		return []zap.Field{zap.Int(name, len(ks)), zap.Strings(name+"Keys", shown)}
	}
	// The Store's logger already carries the phase.
	f := []zap.Field{
		zap.String("readFrom", r.ReadFrom),
		zap.Int("restored", r.Restored),
		zap.Int("fromCheckpoint", r.FromCheckpoint),
		zap.Int("fromLegacy", r.FromLegacy),
		zap.Bool("checkpointRewritten", r.CheckpointRewritten),
	}
	f = append(f, keys("backfilled", r.Backfilled)...)
	f = append(f, keys("orphaned", r.Orphaned)...)
	f = append(f, keys("pruned", r.Pruned)...)
	f = append(f, keys("diverged", r.Diverged)...)
	if r.Shadow != "" {
		f = append(f, zap.String("shadow", r.Shadow))
		f = append(f, keys("shadowOnly", r.ShadowOnly)...)
		f = append(f, keys("servedOnly", r.ServedOnly)...)
	}
	if r.Stale != "" {
		f = append(f, zap.String("stale", r.Stale))
	}
	if r.StaleLegacy != "" {
		f = append(f, zap.String("staleLegacy", r.StaleLegacy))
	}
	if r.LegacyHealed > 0 {
		f = append(f, zap.Int("legacyHealed", r.LegacyHealed))
	}
	if r.Quarantined != "" {
		f = append(f, zap.String("quarantined", r.Quarantined))
	}
	if len(r.Errors) > 0 {
		f = append(f, zap.Errors("errors", r.Errors))
	}
	return f
}
