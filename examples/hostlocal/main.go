package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

// execTimeout bounds one exec: mostly the wait for the locks, which other
// execs hold for milliseconds each. A runtime gives up on a CNI call after
// a few minutes (kubelet's runtime request timeout is two).
const execTimeout = time.Minute

// statusTimeout bounds a STATUS, which a runtime asks often and answers
// its own callers from: a lock held that long means ADDs are stuck too.
const statusTimeout = 10 * time.Second

func main() {
	tuneGC()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, version.All, "CNI phaseshift-host-local plugin: host-local's IPAM, moving to a phaseshift checkpoint")
}

// tuneGC turns the garbage collector off up to a memory limit, unless
// GOGC or GOMEMLIMIT says otherwise. An exec lives for milliseconds and
// frees everything at exit; with the default GOGC a collection starts once
// the heap reaches 4 MB, which reading a thousand allocations from
// host-local's files and the checkpoint does, and on a busy node its
// concurrent work competes with the exec for the CPU. Past the limit the
// collector runs as usual, so a network of a hundred thousand allocations
// still fits.
func tuneGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(gcMemoryLimit)
	debug.SetGCPercent(-1)
}

// gcMemoryLimit is the heap size at which an exec starts collecting.
const gcMemoryLimit = 256 << 20

// execContext is the context of one exec: cancelled by the timeout, or by
// SIGTERM or SIGINT from a runtime that gives up, so that a wait for a lock
// ends with an error instead of a kill.
func execContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}
