package main

import (
	"encoding/json"
	"os"
	"time"

	"github.com/phaseshift/phaseshift/migrate"
)

// envTrace names a file to which each exec appends one JSON line with the
// wall-clock time (Unix nanoseconds) at which it reached each stage:
// "main" (the runtime and every package initialised), "open" (the
// checkpoint open and locked), "lock" (host-local's lock, phases 0 to 2),
// "restore", "write" (the command's work, its one commit included) and
// "close" (both locks released), and how much of "restore" and of
// "write" went to saving the checkpoint (restoreSave, writeSave, in
// nanoseconds, from Store.Stats). A benchmark that notes the time before
// the exec and after the exit splits an exec's wall time with it. Unset,
// nothing is measured or written.
const envTrace = "PHASESHIFT_HOSTLOCAL_TRACE"

// tracer collects one exec's stage times; a nil tracer does nothing.
type tracer struct {
	path  string
	Cmd   string        `json:"cmd"`
	Phase migrate.Phase `json:"phase"`
	PID   int           `json:"pid"`
	Marks []traceMark   `json:"marks"`

	RestoreSave time.Duration `json:"restoreSave"` // checkpoint saves during restore
	WriteSave   time.Duration `json:"writeSave"`   // checkpoint saves during the command's write
}

type traceMark struct {
	Stage string `json:"stage"`
	At    int64  `json:"at"` // Unix nanoseconds
}

func newTracer(cmd string) *tracer {
	path := os.Getenv(envTrace)
	if path == "" {
		return nil
	}
	return &tracer{path: path, Cmd: cmd, PID: os.Getpid()}
}

func (t *tracer) mark(stage string) {
	if t != nil {
		t.Marks = append(t.Marks, traceMark{Stage: stage, At: time.Now().UnixNano()})
	}
}

// restored records how long restore spent saving the checkpoint.
func (t *tracer) restored(s *migrate.Store[key, alloc]) {
	if t != nil {
		t.RestoreSave = s.Stats().CheckpointSaveTime
	}
}

// wrote records how long the command's write spent saving it.
func (t *tracer) wrote(s *migrate.Store[key, alloc]) {
	if t != nil {
		t.WriteSave = s.Stats().CheckpointSaveTime - t.RestoreSave
	}
}

func (t *tracer) setPhase(p migrate.Phase) {
	if t != nil {
		t.Phase = p
	}
}

// flush appends the line, in one write(2) to a file opened O_APPEND, so
// that concurrent execs do not interleave their lines.
func (t *tracer) flush() {
	if t == nil {
		return
	}
	b, err := json.Marshal(t)
	if err != nil {
		return
	}
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close()
}
