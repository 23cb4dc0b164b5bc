package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// prefix names everything the suite makes, so that a sweep finds what a
// killed run left behind.
const prefix = "phaseshift-e2e"

// bridgeName is the Linux bridge the bridge plugin makes (15 bytes, the
// most an interface name holds).
const bridgeName = prefix + "0"

// cgroupParent is the cgroup the pods go under (cgroupfs driver).
const cgroupParent = "/" + prefix

// shimSocketDir is where containerd 1.6's runc shims put their sockets,
// whatever containerd's state directory: /run/containerd/s.
const shimSocketDir = "/run/containerd/s"

// lock is held while a run sets up, runs and tears down: a socket bound
// to an address in the abstract namespace, which no file backs and which
// the kernel frees when the process dies, however it dies.
var lock *net.UnixListener

// takeLock waits for other runs of the suite on this machine to end: they
// share the bridge's name, the cgroup parent and the sweep.
func takeLock(ctx context.Context) error {
	addr := &net.UnixAddr{Name: "@" + prefix + ".lock", Net: "unix"}
	for {
		l, err := net.ListenUnix("unix", addr)
		if err == nil {
			lock = l
			return nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			return fmt.Errorf("take the suite's lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("another run of the suite holds its lock: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func releaseLock() {
	if lock != nil {
		_ = lock.Close()
		lock = nil
	}
}

// sweep removes whatever the suite made, this run's or a killed run's: it
// kills the processes, unmounts, deletes the bridge and the cgroups, and
// removes the shims' sockets and the directories. It goes on after an
// error and returns them all.
func sweep() error {
	var errs []error
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*"))
	shimSockets := shimSocketsOf(dirs)
	errs = append(errs, killProcesses())
	errs = append(errs, unmountUnder(dirs))
	errs = append(errs, deleteBridge(bridgeName))
	errs = append(errs, removeCgroups())
	errs = append(errs, removeCNICache(cniCacheDir))
	for _, s := range shimSockets {
		if err := os.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// The shim socket directory is containerd's; the suite removes it only
	// when it is empty and nothing else of containerd's is there.
	_ = os.Remove(shimSocketDir)
	_ = os.Remove(filepath.Dir(shimSocketDir))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cniCacheDir is where libcni, inside containerd, caches the result of
// each ADD until its DEL: containerd 1.6 has no setting to move it.
const cniCacheDir = "/var/lib/cni/results"

// removeCNICache removes from dir the cached results of the suite's pods
// that a killed run never deleted: the network's own, named
// <prefix>-<sandbox>-<ifname>, and containerd's loopback's for the same
// sandboxes, cni-loopback-<sandbox>-lo.
func removeCNICache(dir string) error {
	var errs []error
	for _, f := range cniCacheLeftovers(dir) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cniCacheLeftovers lists the files of dir that removeCNICache removes.
func cniCacheLeftovers(dir string) []string {
	ours, _ := filepath.Glob(filepath.Join(dir, network+"-*"))
	var out []string
	for _, f := range ours {
		rest := strings.TrimPrefix(filepath.Base(f), network+"-")
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 {
			continue
		}
		out = append(out, f)
		loop, _ := filepath.Glob(filepath.Join(dir, "cni-loopback-"+rest[:i]+"-*"))
		out = append(out, loop...)
	}
	return out
}

// shimSocketsOf finds the sockets of the shims of containerd state
// directories under dirs: each task's bundle holds its shim's address.
func shimSocketsOf(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			addr := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
			if strings.HasPrefix(addr, shimSocketDir+"/") {
				out = append(out, addr)
			}
		}
	}
	return out
}

// ours reports whether process pid is the suite's: containerd or a shim
// (its command line names a directory of the suite) or a pod (its cgroup
// is under the suite's parent).
func ours(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if strings.Contains(string(cmdline), filepath.Join(os.TempDir(), prefix+"-")) {
		return true
	}
	cgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && strings.Contains(string(cgroup), ":"+cgroupParent+"/")
}

// killProcesses kills the suite's processes with SIGKILL and waits until
// they are gone.
func killProcesses() error {
	self := os.Getpid()
	var killed []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !ours(pid) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, pid)
		}
	}
	return waitFor(30*time.Second, "the suite's processes to die", func() bool {
		for _, pid := range killed {
			// A zombie is gone for this purpose: its parent (containerd,
			// a shim, or this process) reaps it.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err == nil && !strings.Contains(string(stat), ") Z ") {
				return false
			}
		}
		return true
	})
}

// unmountUnder unmounts every mount point under dirs, deepest first.
func unmountUnder(dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		point := unescapeMountPath(fields[4])
		for _, d := range dirs {
			if strings.HasPrefix(point, d+"/") {
				points = append(points, point)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// deleteBridge deletes the bridge name, if there is one, with the bridge
// ioctls (brctl delbr): down first, then gone.
func deleteBridge(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err == nil {
		ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
		_ = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}
	const siocBrDelBr = 0x89a1
	cname, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), siocBrDelBr, uintptr(unsafe.Pointer(cname))); errno != 0 {
		return fmt.Errorf("delete bridge %s: %w", name, errno)
	}
	return nil
}

// removeCgroups removes the cgroup parent from every hierarchy, children
// first, waiting for the kernel to let go of the cgroups of processes
// just killed.
func removeCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupParent)
	if own, err := os.Stat("/sys/fs/cgroup" + cgroupParent); err == nil && own.IsDir() {
		roots = append(roots, "/sys/fs/cgroup"+cgroupParent) // a unified (v2) hierarchy
	}
	var last error
	err := waitFor(30*time.Second, "the suite's cgroups to be removed", func() bool {
		last = nil
		for _, root := range roots {
			if err := removeCgroupTree(root); err != nil {
				last = err
			}
		}
		return last == nil
	})
	return errors.Join(err, last)
}

func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// TestCNICacheLeftovers: the sweep finds the cached results of the
// suite's sandboxes, its network's and the loopback's, and nothing else.
// It needs neither root nor -e2e.
func TestCNICacheLeftovers(t *testing.T) {
	dir := t.TempDir()
	id, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	for _, name := range []string{
		network + "-" + id + "-eth0", "cni-loopback-" + id + "-lo", // a killed run's pod
		"cni-loopback-" + other + "-lo", "k8s-pod-network-" + other + "-eth0", // someone else's
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	require.NoError(t, removeCNICache(dir))
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"cni-loopback-" + other + "-lo", "k8s-pod-network-" + other + "-eth0"}, names)
}
