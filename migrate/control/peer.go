package control

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peer is who is at the other end of a connection, as the kernel says
// (SO_PEERCRED: the credentials of the process that connected, at the
// time it connected).
type peer struct {
	uid uint32
	pid int32
}

func peerOf(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if cerr != nil {
		return peer{}, cerr
	}
	return peer{uid: cred.Uid, pid: cred.Pid}, nil
}

// allowed reports whether p may use the socket: the daemon's own user, or
// root.
func (p peer) allowed() bool {
	return p.uid == 0 || p.uid == uint32(os.Geteuid())
}
