package migrate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/migrate"
)

func ipamK(i int) ipamKey {
	return ipamKey{Network: "_migrated-from-cri", ContainerID: fmt.Sprintf("pod-%02d", i), IfName: "unknown"}
}

// TestReportNamesOrphanedAndDivergedKeysAsJSON: the report line and the
// log give the keys an operator acts on as the JSON the phaseshift command
// takes, not in Go's syntax: String the orphaned and diverged ones,
// sorted, the first 10 and how many more; the log every list's first 10.
func TestReportNamesOrphanedAndDivergedKeysAsJSON(t *testing.T) {
	var orphaned []ipamKey
	for i := 12; i > 0; i-- {
		orphaned = append(orphaned, ipamK(i))
	}
	r := migrate.Report[ipamKey]{
		Phase: migrate.PhaseMigrate, ReadFrom: migrate.ReadCheckpointAndLegacy, Restored: 14,
		Orphaned: orphaned, Diverged: []ipamKey{ipamK(40)}, Backfilled: []ipamKey{ipamK(50)},
	}
	line := r.String()
	assert.Contains(t, line, `, diverged 1 [{"network":"_migrated-from-cri","containerID":"pod-40","ifName":"unknown"}]`)
	assert.Contains(t, line, `orphaned 12 [{"network":"_migrated-from-cri","containerID":"pod-01","ifName":"unknown"} {"network":"_migrated-from-cri","containerID":"pod-02"`)
	assert.Contains(t, line, `"pod-10","ifName":"unknown"}] and 2 more, diverged`, "the first 10, sorted, then how many more")
	assert.NotContains(t, line, "pod-11")
	assert.Contains(t, line, "backfilled 1,", "the other lists are counted only")
	assert.NotContains(t, line, "pod-50")
	assert.NotContains(t, line, "{_migrated-from-cri", "no Go syntax")

	// Each key in the line is one phaseshift takes: it decodes as the key.
	for _, m := range regexp.MustCompile(`\{[^{}]*\}`).FindAllString(line, -1) {
		var k ipamKey
		require.NoError(t, json.Unmarshal([]byte(m), &k), m)
	}

	var buf bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.InfoLevel))
	log.Info("restored", zap.Object("report", r))
	var entry struct {
		Report struct {
			Orphaned     int       `json:"orphaned"`
			OrphanedKeys []ipamKey `json:"orphanedKeys"`
			DivergedKeys []ipamKey `json:"divergedKeys"`
		} `json:"report"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &entry), buf.String())
	assert.Equal(t, 12, entry.Report.Orphaned)
	assert.Len(t, entry.Report.OrphanedKeys, 10, "the log shows the first 10")
	assert.Equal(t, []ipamKey{ipamK(40)}, entry.Report.DivergedKeys, "logged as JSON objects")

	// A key encoding/json cannot encode is said to be one.
	c := migrate.Report[complex128]{Phase: migrate.PhaseMigrate, ReadFrom: migrate.ReadCheckpoint, Orphaned: []complex128{1i}}
	assert.Contains(t, c.String(), "orphaned 1 [(a key that does not encode as JSON)]")
}
