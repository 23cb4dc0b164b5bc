package checkpoint_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// FuzzLoad feeds arbitrary bytes to Load: it must never panic, and must
// either load or fail with one of the documented sentinels. What loads must
// survive a save and load unchanged. The seeds include intact files, so the
// fuzzer starts from inputs that pass the checksum.
func FuzzLoad(f *testing.F) {
	ctx := context.Background()
	seed := checkpoint.NewMemory[podKey, alloc]()
	_ = seed.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "expand", Writer: "fuzz"}, Entries: map[podKey]alloc{
		key("a"): {IP: netip.MustParseAddr("10.0.0.2"), Since: time.Unix(0, 1).UTC()},
		key("b"): {IP: netip.MustParseAddr("fd00::1")},
	}})
	f.Add(seed.Bytes())
	_ = seed.Save(ctx, checkpoint.Snapshot[podKey, alloc]{})
	f.Add(seed.Bytes())
	f.Add([]byte{})
	f.Add([]byte("{}"))
	f.Add([]byte("{\n  \"format\": 1,\n" + strings.Repeat(" ", 80)))
	body := "{\n  \"format\": 1,\n  \"schema\": 1,\n  \"phase\": \"\",\n  \"writer\": \"\",\n  \"bootID\": \"\",\n  \"seq\": 1,\n  \"savedAt\": \"0001-01-01T00:00:00Z\",\n  \"entries\": [\n    {\"key\":{\"network\":1},\"value\":{}}\n  ],\n"
	f.Add([]byte(body + sealFor(body)))
	// Entries with fields the types lack (in the value, in the key), a key
	// holding U+FFFD (which reads back), a value whose decoder fails and
	// a header whose time does not parse.
	for _, entries := range []string{
		`    {"key":{"network":"n","containerID":"c","ifName":"e"},"value":{"ip":"10.0.0.1","since":"2026-01-01T00:00:00Z","mtu":9000}}`,
		`    {"key":{"network":"n","containerID":"c","ifName":"e","zone":"z"},"value":{}}`,
		`    {"key":{"network":"\ufffd","containerID":"\\ufffd","ifName":"e"},"value":{}},` + "\n" + `    {"key":{"network":"n"},"value":{"ip":"not an ip"}}`,
	} {
		body := strings.Replace(body, `    {"key":{"network":1},"value":{}}`, entries, 1)
		f.Add([]byte(body + sealFor(body)))
	}
	badTime := strings.Replace(body, `"0001-01-01T00:00:00Z"`, `"yesterday"`, 1)
	f.Add([]byte(badTime + sealFor(badTime)))

	f.Fuzz(func(t *testing.T, data []byte) {
		m := checkpoint.NewMemory[podKey, alloc]()
		checkpointtest.SetBytes(m, data)
		s, err := m.Load(ctx)
		if err != nil {
			for _, sentinel := range []error{checkpoint.ErrCorrupt, checkpoint.ErrNewerSchema, checkpoint.ErrOlderSchema, checkpoint.ErrBadEntry, checkpoint.ErrTypeMismatch} {
				if errors.Is(err, sentinel) {
					return
				}
			}
			t.Fatalf("Load returned an error that matches no sentinel: %v", err)
		}
		if err := m.Save(ctx, s); err != nil {
			t.Fatalf("a loaded snapshot does not save: %v", err)
		}
		again, err := m.Load(ctx)
		if err != nil {
			t.Fatalf("a saved snapshot does not load: %v", err)
		}
		if len(again.Entries) != len(s.Entries) {
			t.Fatalf("round trip changed the entry count: %d != %d", len(again.Entries), len(s.Entries))
		}
		for k, v := range s.Entries {
			w, ok := again.Entries[k]
			if !ok || w.IP != v.IP || !w.Since.Equal(v.Since) {
				t.Fatalf("round trip changed entry %v", k)
			}
		}
	})
}
