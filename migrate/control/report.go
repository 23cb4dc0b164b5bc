package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/migrate"
)

// The restore's report (WithReport): its line, and the keys of the
// orphaned and diverged entries it left, for an operator to act on
// without typing a key. An entry is still as restore left it while its
// origin is not migrate.OriginWrite: a write or delete since has settled
// it, as package metrics counts it for the fleet gate. A prune deletes
// only such orphans, and decides it in the commit that deletes them
// (migrate.Tx.Origin), so that an orphan written since the listing the
// operator confirmed - it is no longer an orphan - is kept.

// restoreReport is what WithReport serves of a Report.
type restoreReport[K comparable, V any] struct {
	line     string
	orphaned []reportKey[K]
	diverged []reportKey[K]
}

// reportKey is a key of the Report with its JSON, the text the answers
// carry and a prune request names it by.
type reportKey[K comparable] struct {
	key  K
	json []byte
}

// reportOf checks WithReport's Report against the Store's key type; nil
// without WithReport.
func reportOf[K comparable, V any](r any) (*restoreReport[K, V], error) {
	if r == nil {
		return nil, nil
	}
	rep, ok := r.(migrate.Report[K])
	if !ok {
		var k K
		return nil, fmt.Errorf("control: %w: WithReport: the Report is a %T, and the Store's key is a %T: give the Report of this Store's Restore", ErrInvalidOption, r, k)
	}
	out := &restoreReport[K, V]{line: rep.String()}
	var err error
	if out.orphaned, err = keysOf(rep.Orphaned); err != nil {
		return nil, err
	}
	if out.diverged, err = keysOf(rep.Diverged); err != nil {
		return nil, err
	}
	return out, nil
}

// keysOf returns keys with their JSON, sorted by it.
func keysOf[K comparable](keys []K) ([]reportKey[K], error) {
	out := make([]reportKey[K], 0, len(keys))
	for _, k := range keys {
		b, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("control: %w: WithReport: a key of the Report does not encode as JSON (%T): the phaseshift command could not name it", ErrInvalidOption, k)
		}
		out = append(out, reportKey[K]{key: k, json: b})
	}
	slices.SortFunc(out, func(a, b reportKey[K]) int { return bytes.Compare(a.json, b.json) })
	return out, nil
}

// asRestored reports whether the Store still serves k as restore left it.
func asRestored[K comparable, V any](store Store[K, V], k K) bool {
	o, ok := store.Origin(k)
	return ok && o != migrate.OriginWrite
}

// list writes {"kind":"orphaned"|"diverged","key":K} for each of the
// Report's entries still as restore left it; the status carries the
// report's line.
func (r *restoreReport[K, V]) list(emit func(line []byte), store Store[K, V]) status {
	n := 0
	for _, kind := range []struct {
		name string
		keys []reportKey[K]
	}{{"orphaned", r.orphaned}, {"diverged", r.diverged}} {
		for _, k := range kind.keys {
			if !asRestored(store, k.key) {
				continue
			}
			emit(fmt.Appendf(nil, `{"kind":%q,"key":%s}`+"\n", kind.name, k.json))
			n++
		}
	}
	return status{Status: "ok", Count: n, Report: r.line}
}

// pruned is one key of a prune-orphans request and what became of it.
type pruned[K comparable] struct {
	json   []byte
	key    K
	orphan bool   // an orphan of the Report
	done   bool   // deleted
	reason string // why not
}

// prune deletes, in one Update, each requested key that is an orphan of
// the Report still as restore left it, and writes
// {"key":K,"pruned":bool,"reason":"..."} for each; the status counts the
// deleted. A key that is not JSON of the Store's key type prunes nothing.
func (r *restoreReport[K, V]) prune(ctx context.Context, emit func(line []byte), store Store[K, V], raw []json.RawMessage, timeout time.Duration, log *zap.Logger) status {
	if len(raw) == 0 {
		return status{Status: "error", Code: CodeBadRequest, Error: `name the orphans to prune: {"op":"prune-orphans","keys":[K,...]}, with the keys the report request listed`}
	}
	var want []*pruned[K]
	for i, rk := range raw {
		k, canon, err := decodeKey[K](rk)
		if err != nil {
			return status{Status: "error", Code: CodeBadKey, Error: fmt.Sprintf("key %d: %v; nothing was pruned", i+1, err)}
		}
		if slices.ContainsFunc(want, func(p *pruned[K]) bool { return bytes.Equal(p.json, canon) }) {
			continue
		}
		p := &pruned[K]{json: canon, key: k, reason: "not an orphan of the daemon's last restore"}
		p.orphan = slices.ContainsFunc(r.orphaned, func(o reportKey[K]) bool { return bytes.Equal(o.json, canon) })
		want = append(want, p)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := store.Update(ctx, func(tx *migrate.Tx[K, V]) error {
		for _, p := range want {
			if !p.orphan {
				continue
			}
			p.done = false
			switch o, ok := tx.Origin(p.key); {
			case !ok:
				p.reason = "gone: deleted since the restore"
			case o == migrate.OriginWrite:
				p.reason = "written since the restore: no longer an orphan, kept"
			default:
				tx.Delete(p.key)
				p.done, p.reason = true, ""
			}
		}
		return nil
	})
	if err != nil {
		log.Error("a prune of orphans through the control socket failed", zap.Int("asked", len(want)), zap.Error(err))
		return status{Status: "error", Code: CodeFailed, Error: "the Store's Update failed, nothing was pruned: " + err.Error()}
	}
	n := 0
	var done, kept []json.RawMessage
	for _, p := range want {
		line, _ := json.Marshal(struct {
			Key    json.RawMessage `json:"key"`
			Pruned bool            `json:"pruned"`
			Reason string          `json:"reason,omitempty"`
		}{p.json, p.done, p.reason})
		emit(append(line, '\n'))
		if p.done {
			n++
			done = append(done, p.json)
		} else {
			kept = append(kept, p.json)
		}
	}
	log.Info("pruned orphans through the control socket", zap.Int("pruned", n), zap.Int("kept", len(kept)),
		zap.Any("prunedKeys", done), zap.Any("keptKeys", kept))
	return status{Status: "ok", Count: n}
}

func noReport() status {
	return status{Status: "error", Code: CodeNoReport, Error: "the daemon serves no restore report on its control socket (it gave control.Listen no WithReport)"}
}
