package main

import (
	"fmt"
	"iter"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// allocator picks the addresses of one ADD, as host-local's allocator.Get
// does, from the state an Update sees.
type allocator struct {
	c   *config
	dir string // host-local's directory, consulted in phases 0 to 2; "" in phase 3
	n   int    // the number of entries restored, to size the set of used addresses
}

func newAllocator(s *session) *allocator {
	a := &allocator{c: s.c, n: s.store.Len()}
	if s.src != nil {
		a.dir = s.src.Dir()
	}
	return a
}

// used returns every address the state holds; n is about how many there
// are (the map is sized for it, as a thousand entries cost as much to
// rehash as to insert).
func (a *allocator) used(all iter.Seq2[key, alloc], n int) map[netip.Addr]struct{} {
	used := make(map[netip.Addr]struct{}, n+len(a.c.ranges))
	for _, v := range all {
		for _, ip := range v.IPs {
			used[ip] = struct{}{}
		}
	}
	return used
}

// taken reports whether ip is allocated: the state holds it or, in the
// phases that write host-local's files, a file is named after it. A file
// that List could not read (an empty one left by a host-local killed
// mid-write) holds its address as host-local's Reserve sees it, and Put
// would refuse it; checking here keeps such an address from failing every
// ADD that reaches it.
func (a *allocator) taken(used map[netip.Addr]struct{}, ip netip.Addr) bool {
	if _, ok := used[ip]; ok {
		return true
	}
	return a.dir != "" && fileExists(filepath.Join(a.dir, ip.String()))
}

// lastReserved reads host-local's round-robin hint for range set i, as its
// LastReservedIP does: the zero Addr when there is none or it does not
// hold an address (host-local then starts from the first range).
func (a *allocator) lastReserved(i int) netip.Addr {
	data, err := os.ReadFile(a.c.lastReservedPath(i))
	if err != nil {
		return netip.Addr{}
	}
	ip, err := parseAddr(string(data))
	if err != nil {
		return netip.Addr{}
	}
	return ip
}

// free returns the first free address of range set i, walking round-robin
// from the one after the last reserved. The walk meets a free address
// within len(used)+1 candidates when there is one, so it is short even in
// an IPv6 range of 2^64 addresses.
func (a *allocator) free(i int, used map[netip.Addr]struct{}) (netip.Addr, error) {
	set := a.c.ranges[i]
	it := set.iter(a.lastReserved(i))
	for ip := it.next(); ip.IsValid(); ip = it.next() {
		if !a.taken(used, ip) {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no IP addresses available in range set: %s", set)
}

// allocate allocates one address from each range set to k and puts the
// allocation in tx. It returns the addresses in range-set order. It
// fails as host-local's ADD does, range set by range set, with its
// errors: an address the runtime asked for is taken from the range set
// holding it, and one that is taken (by anyone, k included), a gateway,
// or in no range set fails the ADD; a range set asked for nothing fails
// when k already holds one of its addresses, or when it has none free.
// Past host-local, an attachment that still holds addresses (outside
// every range set asked, or in range sets that granted a requested one)
// is refused: host-local would give it a second allocation, and this
// plugin keeps one per attachment.
func (a *allocator) allocate(tx *migrate.Tx[key, alloc], k key) ([]netip.Addr, error) {
	held := heldBy(tx, k)
	used := a.used(tx.All(), a.n)
	requested := slices.Clone(a.c.requested)
	ips := make([]netip.Addr, 0, len(a.c.ranges))
	for i, set := range a.c.ranges {
		var ip netip.Addr
		var err error
		if j := slices.IndexFunc(requested, set.contains); j >= 0 {
			ip, err = a.requested(set, requested[j], used)
			requested = slices.Delete(requested, j, j+1)
		} else if d := slices.IndexFunc(held, set.contains); d >= 0 {
			err = duplicate(held[d], k)
		} else {
			ip, err = a.free(i, used)
		}
		if err != nil {
			return nil, fmt.Errorf("failed to allocate for range %d: %w", i, err)
		}
		used[ip] = struct{}{}
		ips = append(ips, ip)
	}
	if len(requested) > 0 {
		s := make([]string, len(requested))
		for i, ip := range requested {
			s[i] = ip.String()
		}
		return nil, fmt.Errorf("failed to allocate all requested IPs: %s", strings.Join(s, " "))
	}
	if len(held) > 0 {
		return nil, duplicate(held[0], k)
	}
	tx.Put(k, hostlocal.NewAllocation(ips...))
	return ips, nil
}

// requested checks an address the runtime asked for, as host-local does.
func (a *allocator) requested(set rangeSet, ip netip.Addr, used map[netip.Addr]struct{}) (netip.Addr, error) {
	r, _ := set.rangeFor(ip)
	if ip == r.gateway {
		return netip.Addr{}, fmt.Errorf("requested ip %s is subnet's gateway", ip)
	}
	if a.taken(used, ip) {
		return netip.Addr{}, fmt.Errorf("requested IP address %s is not available in range set %s", ip, set)
	}
	return ip, nil
}

// heldBy returns the addresses the attachment k holds, or, as host-local's
// GetByID finds, those of a pre-v0.8.0 file naming its container alone.
func heldBy(tx *migrate.Tx[key, alloc], k key) []netip.Addr {
	v, ok := tx.Get(k)
	if !ok {
		if old, isOld := preV080(k); isOld {
			v, _ = tx.Get(old)
		}
	}
	return v.IPs
}

// duplicate is host-local's refusal of a second ADD for an attachment
// that holds ip.
func duplicate(ip netip.Addr, k key) error {
	return fmt.Errorf("%s has been allocated to %s, duplicate allocation is not allowed", ip, k.ContainerID)
}
