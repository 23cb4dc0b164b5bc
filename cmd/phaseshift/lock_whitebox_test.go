package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLockInfoString(t *testing.T) {
	yes, no := true, false
	assert.Equal(t, "held by PID 7 (ipamd)", lockInfo{Exists: true, Held: &yes, PID: 7, Command: "ipamd"}.String())
	assert.Equal(t, "held, PID unknown; why", lockInfo{Exists: true, Held: &yes, Note: "why"}.String())
	assert.Equal(t, "not held (its last holder was PID 9)", lockInfo{Exists: true, Held: &no, RecordedPID: 9}.String())
	assert.Equal(t, "unknown; cannot tell", lockInfo{Exists: true, Note: "cannot tell"}.String())
}
