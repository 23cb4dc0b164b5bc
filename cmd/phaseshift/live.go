package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
	"github.com/phaseshift/phaseshift/migrate/control"
)

// A running daemon that serves its control socket (package
// migrate/control, PATH.control.sock) takes list, get and delete: the
// command sends them to the daemon's own Store, so that a delete leaves
// the daemon's memory and its checkpoint in agreement. The socket is used
// when a process holds the checkpoint's lock (or that cannot be told) and
// the socket is there; otherwise, and when nothing answers on it, the
// command reads and repairs the file as it would without a daemon.

// daemon is the control socket of the process that holds a checkpoint's
// lock.
type daemon struct {
	socket string
	holder lockInfo
}

// liveDaemon returns the daemon serving path's control socket, or nil.
func liveDaemon(path string) *daemon {
	sock := control.SocketPath(path)
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return nil
	}
	l := lockState(engine.NamesOf(path).Lock)
	if l.Held != nil && !*l.Held {
		return nil // left by a daemon that died
	}
	return &daemon{socket: sock, holder: l}
}

// client is a Client of the daemon's socket that checks, before it sends
// anything, that the process serving it is the one that holds the
// checkpoint's lock (where the kernel says which does), of root or the
// lock file's owner: a socket another user bound at the name, where the
// directory let it (a sticky one), is not taken for the daemon's.
func (d *daemon) client() *control.Client {
	pid := 0
	if d.holder.fromKernel {
		pid = d.holder.PID
	}
	uids := []uint32{0}
	if d.holder.owner != 0 {
		uids = append(uids, d.holder.owner)
	}
	return control.NewClient(d.socket, control.ExpectServer(pid, uids...))
}

// who names the daemon in messages.
func (d *daemon) who() string {
	if d.holder.PID > 0 {
		return fmt.Sprintf("the running daemon (PID %d)", d.holder.PID)
	}
	return "the running daemon"
}

// notServing reports whether err says that nothing serves the socket (a
// daemon that died left it, or it went away): the command then uses the
// file.
func notServing(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist)
}

// liveError turns an error of the control socket into the command's exit
// status and message.
func (d *daemon) liveError(path string, key rawfile.Key, err error) error {
	var re *control.RemoteError
	switch {
	case errors.Is(err, control.ErrNoSuchKey):
		return fail(exitNo, "%s has no entry with key %s in its Store (asked through %s): see the keys with phaseshift list %s | jq -c .key", d.who(), key, d.socket, path)
	case errors.Is(err, control.ErrBadKey):
		return usageError("KEY: %v", err)
	case errors.Is(err, control.ErrRefused):
		return fail(exitUnreadable, "%s refused this user on its control socket %s: %v", d.who(), d.socket, err)
	case errors.Is(err, fs.ErrPermission):
		return fail(exitUnreadable, "cannot open %s's control socket %s: %v: run as the daemon's user or root", d.who(), d.socket, err)
	case errors.Is(err, control.ErrNotTheDaemon):
		return fail(exitUnreadable, "refusing %s: %v: another process bound it; remove it (the daemon binds it again at its next start) and look at who can write %s", d.socket, err, filepath.Dir(d.socket))
	case errors.As(err, &re) && re.Code == control.CodeBusy:
		return fail(exitFailed, "%s is busy: %v", d.who(), err)
	}
	return fail(exitFailed, "through %s's control socket %s: %v", d.who(), d.socket, err)
}

// liveList writes the entries of the daemon's Store to e.out; served is
// false when nothing answered on the socket.
func (d *daemon) liveList(ctx context.Context, e *env, path string) (served bool, err error) {
	res, err := d.client().List(ctx, func(line []byte) error {
		_, err := e.out.Write(line)
		return err
	})
	if notServing(err) {
		return false, nil
	}
	if err != nil {
		return true, d.liveError(path, "", err)
	}
	if res.LossyKeys > 0 {
		fmt.Fprintf(e.errOut, "phaseshift list: %d keys of %s's Store do not read back as themselves from their JSON: get and delete cannot name them\n", res.LossyKeys, d.who())
	}
	return true, nil
}

// liveGet writes key's entry in the daemon's Store to e.out.
func (d *daemon) liveGet(ctx context.Context, e *env, path string, key rawfile.Key) (served bool, err error) {
	line, err := d.client().Get(ctx, []byte(key))
	if notServing(err) {
		return false, nil
	}
	if err != nil {
		return true, d.liveError(path, key, err)
	}
	_, err = e.out.Write(line)
	return true, err
}

// liveDelete deletes key's entry through the daemon's Store, and reads the
// checkpoint back to report it.
func (d *daemon) liveDelete(ctx context.Context, e *env, path string, key rawfile.Key) (served bool, err error) {
	err = d.client().Delete(ctx, []byte(key))
	if notServing(err) {
		return false, nil
	}
	if err != nil {
		return true, d.liveError(path, key, err)
	}
	j := readFile(ctx, path, 0, false)
	r := &repaired{Path: j.Path, Action: "delete", Key: key, Via: d.socket, Header: j.header(), Entries: len(j.Entries), Changed: true}
	text := fmt.Sprintf("deleted the entry of key %s through %s's control socket %s: its Store's Delete made it durable", key, d.who(), d.socket)
	if j.verdict == verdictIntact {
		text += fmt.Sprintf(" (%s is now seq %d, %d entries)", j.Path, seqOf(j), len(j.Entries))
	}
	return true, printRepaired(e, r, text)
}

// controlJSON is the control socket in inspect's --json output; nil when
// there is none.
type controlJSON struct {
	Path string `json:"path"`
	Used bool   `json:"used"`
}

func describeControl(path string) *controlJSON {
	sock := control.SocketPath(path)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return nil
	}
	return &controlJSON{Path: sock, Used: liveDaemon(path) != nil && answers(sock)}
}

// answers reports whether a process listens on the unix socket sock. A
// socket a dead daemon left refuses the connection even while another
// process, which serves none, holds the lock. A refusal for another reason
// (the socket's mode) still means a daemon listens.
func answers(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return !notServing(err)
	}
	_ = c.Close()
	return true
}

// String describes the control socket in one line.
func (c *controlJSON) String() string {
	switch {
	case c == nil:
		return "none (list, get and delete read and repair the file)"
	case c.Used:
		return c.Path + ": list, get and delete go to the running daemon's Store"
	}
	return c.Path + ": nothing answers on it (left by a daemon that is gone); list, get and delete use the file"
}
