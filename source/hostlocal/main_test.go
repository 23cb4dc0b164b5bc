package hostlocal_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"go.uber.org/goleak"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// The lock tests re-execute this test binary as a second process: an old
// host-local binary holding or waiting for its lock, or one exec of a
// plugin built on phaseshift. The environment says which.
const (
	envRole    = "HOSTLOCAL_TEST_ROLE" // "hold", "wait", "old-add" or "exec"
	envDataDir = "HOSTLOCAL_TEST_DATADIR"
	envPhase   = "HOSTLOCAL_TEST_PHASE"
	envID      = "HOSTLOCAL_TEST_ID"
	envCkpt    = "HOSTLOCAL_TEST_CHECKPOINT"
)

// TestMain runs a child role when the environment asks for one, and
// otherwise the tests, failing the package if one leaves a goroutine
// behind.
func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func child(role string) error {
	dataDir := os.Getenv(envDataDir)
	switch role {
	case "hold", "wait":
		// What a host-local exec does: the plugins' store, its Lock.
		st, err := disk.New(network, dataDir)
		if err != nil {
			return err
		}
		if role == "wait" {
			fmt.Println("waiting")
		}
		if err := st.Lock(); err != nil {
			return err
		}
		if role == "wait" {
			fmt.Println("acquired")
			return st.Close()
		}
		fmt.Println("locked")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
		return nil
	case "old-add":
		return oldAdd(dataDir, os.Getenv(envID))
	case "exec":
		phase, err := migrate.ParsePhase(os.Getenv(envPhase))
		if err != nil {
			return err
		}
		ip, err := execAdd(dataDir, os.Getenv(envCkpt), phase, os.Getenv(envID))
		if err != nil {
			return err
		}
		fmt.Println(ip)
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// oldAdd is the part of host-local's ADD that matters here: under its
// lock, reserve the first free address of the range.
func oldAdd(dataDir, id string) error {
	st, err := disk.New(network, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Lock(); err != nil {
		return err
	}
	defer st.Unlock()
	for ip := netip.MustParseAddr("10.9.0.2"); ip.As4()[3] < 255; ip = ip.Next() {
		ok, err := st.Reserve(id, "eth0", ip.AsSlice(), "0")
		if err != nil {
			return err
		}
		if ok {
			fmt.Println(ip)
			return nil
		}
	}
	return fmt.Errorf("range full")
}

// execAdd is one ADD of a plugin built on phaseshift, taking the locks in
// the order the package documentation gives: the checkpoint's, then
// host-local's, held from before Restore to after the write.
func execAdd(dataDir, ckpt string, phase migrate.Phase, id string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := migrate.Config[hostlocal.Key, hostlocal.Allocation]{Phase: phase, Merge: migrate.PreferLegacy[hostlocal.Key, hostlocal.Allocation]}
	if phase != migrate.PhaseLegacy {
		cp, err := checkpoint.Open[hostlocal.Key, hostlocal.Allocation](ctx, ckpt) // 1. the checkpoint's lock
		if err != nil {
			return netip.Addr{}, err
		}
		cfg.Checkpoint = cp
	}
	src, err := hostlocal.Open(dataDir, network)
	if err != nil {
		return netip.Addr{}, err
	}
	defer src.Close()
	if err := src.Lock(ctx); err != nil { // 2. host-local's
		return netip.Addr{}, err
	}
	cfg.Legacy = src
	store, err := migrate.New(cfg)
	if err != nil {
		return netip.Addr{}, err
	}
	defer store.Close()
	if _, err := store.Restore(ctx); err != nil {
		return netip.Addr{}, err
	}
	used := map[netip.Addr]bool{}
	for _, a := range store.All() {
		for _, ip := range a.IPs {
			used[ip] = true
		}
	}
	ip := netip.MustParseAddr("10.9.0.2")
	for used[ip] {
		ip = ip.Next()
	}
	k := hostlocal.Key{Network: network, ContainerID: id, IfName: "eth0"}
	if err := store.Put(ctx, k, hostlocal.NewAllocation(ip)); err != nil {
		return netip.Addr{}, err
	}
	return ip, nil
}

// childProc is this test binary re-executed in a child role.
type childProc struct {
	cmd   *exec.Cmd
	lines <-chan string // what it prints, line by line; closed when it exits
	done  chan struct{} // closed when its output is read to the end
}

// wait waits for the child to exit, after reading all it printed.
func (c *childProc) wait() error {
	<-c.done
	return c.cmd.Wait()
}

// kill kills the child with SIGKILL and waits for it.
func (c *childProc) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.wait()
}

// startChild starts this test binary in role, with env (key, value,
// ...). A child still running at cleanup is killed.
func startChild(t *testing.T, role string, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role)
	for i := 0; i+1 < len(env); i += 2 {
		cmd.Env = append(cmd.Env, env[i]+"="+env[i+1])
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // a holding child waits on it until killed
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	c := &childProc{cmd: cmd, lines: lines, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		if cmd.ProcessState == nil {
			c.kill()
		}
	})
	return c
}

// expectLine waits for the child's next line, which must be want.
func expectLine(t *testing.T, c *childProc, want string) {
	t.Helper()
	select {
	case got, ok := <-c.lines:
		if !ok || got != want {
			t.Fatalf("child printed %q (still running: %v), want %q", got, ok, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not print %q within 30s", want)
	}
}
