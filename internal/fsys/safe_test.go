package fsys_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// Every way fsys.OS opens an existing file refuses a FIFO without
// blocking (issue 34 item 3). Before, ReadFile and Peek blocked in
// open(O_RDONLY) until a writer came, OpenAppend in open(O_WRONLY) until a
// reader came, and TryLock locked the FIFO.
func TestOpensRefuseAFIFO(t *testing.T) {
	for name, open := range map[string]func(string) error{
		"ReadFile": func(p string) error { _, err := fsys.OS{}.ReadFile(p); return err },
		"Peek":     func(p string) error { _, _, _, err := fsys.OS{}.Peek(p, 10, 10); return err },
		"OpenAppend": func(p string) error {
			f, err := fsys.OS{}.OpenAppend(p, 0o600, false)
			if err == nil {
				f.Close()
			}
			return err
		},
		"TryLock": func(p string) error {
			l, err := fsys.OS{}.TryLock(p)
			if err == nil {
				l.Unlock()
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "f")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			done := make(chan error, 1)
			go func() { done <- open(fifo) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				for _, flag := range []int{os.O_WRONLY, os.O_RDONLY} {
					if f, err := os.OpenFile(fifo, flag|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
				}
				<-done
				t.Fatal("blocked for 20s on a FIFO")
			}
			require.ErrorIs(t, err, fsys.ErrUnsafe)
			assert.Contains(t, err.Error(), fifo)
		})
	}
}

// A file read through fsys.OS is an ordinary blocking file again once it
// is checked: the whole of a large file is read.
func TestReadFileReadsAll(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	want := make([]byte, 3<<20)
	for i := range want {
		want[i] = byte(i)
	}
	require.NoError(t, os.WriteFile(p, want, 0o600))
	got, err := fsys.OS{}.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, len(want), len(got))
	assert.Equal(t, want, got)
}
