package migrate

import (
	"fmt"
	"strconv"
	"strings"
)

// Phase is a step of the expand/contract rollout. It decides where Restore
// reads from and where every write goes:
//
//	phase  name      restore reads                                   writes go to
//	0      legacy    legacy                                          legacy
//	1      expand    legacy's entries, with the checkpoint's records  legacy, then the checkpoint
//	                 where legacy agrees; rewrites the checkpoint when it differs
//	2      migrate   the checkpoint, reconciled against legacy       legacy, then the checkpoint
//	3      contract  the checkpoint                                  the checkpoint
//
// A legacy source that takes no explicit writes (it has no source.Writer,
// like CRI) is never written; phases 2 and 3 then differ only in restore.
// The package documentation has every restore rule.
//
// Ship the phase as configuration and move a fleet one step at a time,
// each step once every node runs the one before and the gate (package
// metrics) says so: the new binary at 0 first; 0 → 1, after which a
// rollback to the old binary is safe; 1 → 2, which trusts the checkpoint
// while legacy is still written; 2 → 3 only when no node can go back to a
// version without the checkpoint and no node's last restore left a mark
// (Report.Behind). Rolling back is the same steps in reverse, to this
// package's phase 0 rather than to the old binary. With VolatileLegacy,
// phases 1 to 3 all serve the checkpoint.
type Phase int

// The phases, in rollout order.
const (
	PhaseLegacy   Phase = 0 // what the old version did: legacy only
	PhaseExpand   Phase = 1 // read legacy, write both
	PhaseMigrate  Phase = 2 // read the checkpoint, write both
	PhaseContract Phase = 3 // checkpoint only
)

var phaseNames = [...]string{"legacy", "expand", "migrate", "contract"}

// String returns the phase's name ("legacy", "expand", "migrate",
// "contract"), which is also what the checkpoint records as its writer's
// phase.
func (p Phase) String() string {
	if p.valid() {
		return phaseNames[p]
	}
	return "Phase(" + strconv.Itoa(int(p)) + ")"
}

func (p Phase) valid() bool { return p >= PhaseLegacy && p <= PhaseContract }

// ParsePhase accepts a phase as a number ("0" to "3") or a name ("legacy",
// "expand", "migrate", "contract"), in any case, so that the phase can
// travel as a flag or an environment variable.
func ParsePhase(s string) (Phase, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for i, name := range phaseNames {
		if t == name || t == strconv.Itoa(i) {
			return Phase(i), nil
		}
	}
	return 0, fmt.Errorf("migrate: unknown phase %q: use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract)", s)
}

// MarshalText returns the phase's name.
func (p Phase) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("migrate: invalid phase %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText is ParsePhase, so a Phase works with flag.TextVar and
// encoding/json.
func (p *Phase) UnmarshalText(b []byte) error {
	q, err := ParsePhase(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// WritesLegacy reports whether writes go to the legacy source (phases 0 to
// 2), when it takes explicit writes.
func (p Phase) WritesLegacy() bool { return p >= PhaseLegacy && p <= PhaseMigrate }

// WritesCheckpoint reports whether writes go to the checkpoint (phases 1
// to 3).
func (p Phase) WritesCheckpoint() bool { return p >= PhaseExpand && p <= PhaseContract }
