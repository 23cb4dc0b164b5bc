package benchref

import (
	"fmt"
	"iter"
	"math/bits"
	"net/netip"
	"syscall"
	"time"

	"github.com/phaseshift/phaseshift/internal/testcni"
)

// Key and Alloc are the entries of the benchmarks: an IPAM key as the CNI
// spec defines it (a 64-hex-digit container ID, as containerd makes them)
// and an allocation, about 200 bytes of JSON each.
type Key = testcni.Key

// Alloc is the value of an entry.
type Alloc struct {
	IPs       []netip.Addr `json:"ips"`
	Allocated time.Time    `json:"allocated"`
}

// KeyOf returns the i-th key.
func KeyOf(i int) Key {
	return Key{Network: "aws-cni", ContainerID: fmt.Sprintf("%064x", uint64(i)*0x9e3779b97f4a7c15), IfName: "eth0"}
}

// ValueOf returns a value for the i-th key; gen changes it.
func ValueOf(i, gen int) Alloc {
	ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	return Alloc{IPs: []netip.Addr{ip}, Allocated: time.Date(2026, 11, 30, 8, 0, 0, gen, time.UTC)}
}

// Entries returns n entries.
func Entries(n int) map[Key]Alloc {
	m := make(map[Key]Alloc, n)
	for i := 0; i < n; i++ {
		m[KeyOf(i)] = ValueOf(i, 0)
	}
	return m
}

// LowestFree returns the lowest address of 10.0.0.0/16 that no value of
// all holds: the work of an allocation, as every benchmark makes it (a
// bitmap of the /16, and a scan of every entry).
func LowestFree(all iter.Seq2[Key, Alloc]) netip.Addr {
	var used [1 << 16 / 64]uint64
	for _, v := range all {
		for _, ip := range v.IPs {
			if a := ip.As4(); a[0] == 10 && a[1] == 0 {
				i := int(a[2])<<8 | int(a[3])
				used[i/64] |= 1 << (i % 64)
			}
		}
	}
	free := 0
	for w, word := range used {
		if word != ^uint64(0) {
			free = w*64 + bits.TrailingZeros64(^word)
			break
		}
	}
	return netip.AddrFrom4([4]byte{10, 0, byte(free >> 8), byte(free)})
}

// Clock adds up the time of the calls it runs: a benchmark runs its own
// operation and a reference in turn, on one Clock each, so that both see
// the same machine (these machines are shared and their disks noisy) and
// their ratio is stable where absolute times are not. It also adds up the
// process's CPU time (user and system, of every goroutine and the garbage
// collector) during the calls, which is the calls' own as long as the
// benchmark runs one side at a time.
type Clock struct {
	Total time.Duration
	CPU   time.Duration
	Calls int
}

// Run times one call of op.
func (c *Clock) Run(op func() error) error {
	start, cpu := time.Now(), CPUTime()
	err := op()
	c.CPU += CPUTime() - cpu
	c.Total += time.Since(start)
	c.Calls++
	return err
}

// PerCall returns the mean time of a call.
func (c *Clock) PerCall() time.Duration {
	if c.Calls == 0 {
		return 0
	}
	return c.Total / time.Duration(c.Calls)
}

// CPUPerCall returns the mean CPU time of a call.
func (c *Clock) CPUPerCall() time.Duration {
	if c.Calls == 0 {
		return 0
	}
	return c.CPU / time.Duration(c.Calls)
}

// CPUTime returns the CPU time the process has used so far, user and
// system, or 0 where getrusage fails.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
