package main_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// A crafted header cannot forge the lines of inspect's text: the filter
// every byte passes (printable) lets newline and tab through, and inspect
// prints the header's phase, writer, boot ID and behind with %s, so a
// writer that holds "\n  verdict:   intact" prints a second verdict line,
// here under the real "verdict: corrupt" of a file whose checksum fails
// (the header of a corrupt file is shown as read). The README says the
// filter writes "ESC, the other C0 and the C1 controls" as \u escapes;
// newline is a C0 control.
//
// It fails on the current code: inspect prints two verdict lines, the
// second one "intact".
func TestHeaderCannotForgeInspectLines(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithoutJournal())...)
	require.NoError(t, err)
	forged := "\n  verdict:   intact\n  checksum:  ok"
	m := checkpoint.Meta{Phase: "migrate", Writer: "ipamd v1.8.0" + forged, BootID: "boot-1" + forged, Behind: "behind" + forged}
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: m, Entries: entries(2)}))
	require.NoError(t, f.Close())
	edit(t, path, "10.0.0.1", "10.0.0.9") // the checksum no longer holds

	r := run(t, "inspect", path)
	require.NotEqual(t, 0, r.code, "the file is corrupt: %s", r.stdout)
	var verdicts, checksums []string
	for _, l := range strings.Split(r.stdout, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "verdict:"):
			verdicts = append(verdicts, strings.TrimSpace(l))
		case strings.HasPrefix(strings.TrimSpace(l), "checksum:"):
			checksums = append(checksums, strings.TrimSpace(l))
		}
	}
	assert.Len(t, verdicts, 1, "inspect printed verdict lines the file's header wrote: %q\n%s", verdicts, r.stdout)
	assert.Len(t, checksums, 1, "inspect printed checksum lines the file's header wrote: %q", checksums)
}
