package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// This file is host-local's range logic (plugins v1.7.1,
// plugins/ipam/host-local/backend/allocator: range.go, range_set.go and
// allocator.go's RangeIter) on net/netip, so that an address this plugin
// picks is the one host-local would have picked from the same files: the
// two binaries take turns on a node while it is rolled forward and back.
// It does not import the allocator package, which would link netlink,
// iptables and nftables into a binary that never uses them and slow every
// exec's start.

// addrRange is one range of a range set: host-local's Range, canonical.
type addrRange struct {
	subnet  netip.Prefix // masked: host bits are an error
	start   netip.Addr   // first address handed out, inclusive
	end     netip.Addr   // last address handed out, inclusive
	gateway netip.Addr   // never handed out
}

// rangeJSON is a range as the network configuration writes it.
type rangeJSON struct {
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Subnet     string `json:"subnet"`
	Gateway    string `json:"gateway,omitempty"`
}

// rangeSet is one entry of "ranges": ranges of one address family, from
// which one address is allocated per ADD.
type rangeSet []addrRange

// UnmarshalJSON reads a range set and canonicalises it.
func (s *rangeSet) UnmarshalJSON(b []byte) error {
	var raw []rangeJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out, err := newRangeSet(raw)
	if err != nil {
		return err
	}
	*s = out
	return nil
}

// newRangeSet is host-local's RangeSet.Canonicalize: at least one range,
// each canonical, one family, no overlaps.
func newRangeSet(raw []rangeJSON) (rangeSet, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty range set")
	}
	s := make(rangeSet, 0, len(raw))
	for i, rj := range raw {
		r, err := newRange(rj)
		if err != nil {
			return nil, err
		}
		if i > 0 && r.start.Is4() != s[0].start.Is4() {
			return nil, fmt.Errorf("mixed address families")
		}
		s = append(s, r)
	}
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[i].overlaps(s[j]) {
				return nil, fmt.Errorf("subnets %s and %s overlap", s[i], s[j])
			}
		}
	}
	return s, nil
}

// parseAddr reads an address as net.ParseIP does, in host-local's
// canonical form: an IPv4-mapped IPv6 address is IPv4, and a zone is not
// an address.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("invalid address %q", s)
	}
	return a.Unmap(), nil
}

// newRange is host-local's Range.Canonicalize: the subnet must be the
// network address and leave at least two addresses; the gateway defaults
// to the subnet's first address, the start to the one after the network
// address, and the end to the last address (before the broadcast address
// for IPv4).
func newRange(rj rangeJSON) (addrRange, error) {
	var r addrRange
	p, err := netip.ParsePrefix(rj.Subnet)
	if err != nil || p.Addr().Zone() != "" {
		return r, fmt.Errorf("invalid subnet %q: want an address and a prefix length, such as 10.1.0.0/16", rj.Subnet)
	}
	if p.Addr().Is4In6() {
		// net.ParseCIDR makes an IPv4-mapped subnet an IPv4 one.
		if p.Bits() < 96 {
			return r, fmt.Errorf("invalid subnet %q", rj.Subnet)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if p.Bits() > p.Addr().BitLen()-2 {
		return r, fmt.Errorf("network %s too small to allocate from", p)
	}
	if p.Masked() != p {
		return r, fmt.Errorf("network has host bits set: for a subnet mask of length %d the network address is %s", p.Bits(), p.Masked().Addr())
	}
	r.subnet = p
	r.gateway = p.Addr().Next()
	if rj.Gateway != "" {
		if r.gateway, err = parseAddr(rj.Gateway); err != nil {
			return r, fmt.Errorf("gateway: %w", err)
		}
	}
	r.start = p.Addr().Next()
	if rj.RangeStart != "" {
		if r.start, err = parseAddr(rj.RangeStart); err != nil {
			return r, fmt.Errorf("rangeStart: %w", err)
		}
		if !r.inSubnet(r.start) {
			return r, fmt.Errorf("rangeStart %s not in network %s", r.start, p)
		}
	}
	r.end = lastAddr(p)
	if rj.RangeEnd != "" {
		end, err := parseAddr(rj.RangeEnd)
		if err != nil {
			return r, fmt.Errorf("rangeEnd: %w", err)
		}
		if !r.inSubnet(end) || end.Less(r.start) {
			return r, fmt.Errorf("rangeEnd %s not in network %s", end, p)
		}
		r.end = end
	}
	return r, nil
}

// lastAddr is the last address of p, or the one before it for IPv4 (the
// broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		ones := min(max(p.Bits()-8*i, 0), 8)
		b[i] |= byte(0xff >> ones)
	}
	a, _ := netip.AddrFromSlice(b)
	if a.Is4() {
		a = a.Prev()
	}
	return a
}

func (r addrRange) inSubnet(a netip.Addr) bool {
	return a.Is4() == r.subnet.Addr().Is4() && r.subnet.Contains(a)
}

// contains reports whether a is one of the range's addresses, from start
// to end (the gateway included, as in host-local).
func (r addrRange) contains(a netip.Addr) bool {
	return r.inSubnet(a) && !a.Less(r.start) && !r.end.Less(a)
}

func (r addrRange) overlaps(o addrRange) bool {
	if r.start.Is4() != o.start.Is4() {
		return false
	}
	return r.contains(o.start) || r.contains(o.end) || o.contains(r.start) || o.contains(r.end)
}

// String is host-local's form, start-end.
func (r addrRange) String() string { return r.start.String() + "-" + r.end.String() }

// rangeFor returns the range of s holding a.
func (s rangeSet) rangeFor(a netip.Addr) (addrRange, bool) {
	for _, r := range s {
		if r.contains(a) {
			return r, true
		}
	}
	return addrRange{}, false
}

func (s rangeSet) contains(a netip.Addr) bool {
	_, ok := s.rangeFor(a)
	return ok
}

func (s rangeSet) overlaps(o rangeSet) bool {
	for _, r := range s {
		for _, q := range o {
			if r.overlaps(q) {
				return true
			}
		}
	}
	return false
}

func (s rangeSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// rangeIter walks a range set round-robin, as host-local's RangeIter does:
// from the address after the last one reserved in the set (or from the
// first range's start when there is none, or it is no longer in the set),
// through the end of each range and on to the next range's start,
// wrapping around, skipping gateways, until it comes back to where it
// started.
type rangeIter struct {
	set     rangeSet
	idx     int        // the range cur is in
	cur     netip.Addr // the last address returned; invalid before the first
	startAt netip.Addr // the first address returned; invalid before the first
}

// iter returns the round-robin walk of s after last, the address
// host-local's last_reserved_ip holds for s (the zero Addr if none).
func (s rangeSet) iter(last netip.Addr) *rangeIter {
	it := &rangeIter{set: s}
	for i, r := range s {
		if last.IsValid() && r.contains(last) {
			it.idx, it.cur = i, last
			return it
		}
	}
	return it
}

// next returns the next candidate address, or the zero Addr when the walk
// is back where it started.
func (it *rangeIter) next() netip.Addr {
	for {
		r := it.set[it.idx]
		switch {
		case !it.cur.IsValid():
			it.cur = r.start
		case it.cur == r.end:
			it.idx = (it.idx + 1) % len(it.set)
			r = it.set[it.idx]
			it.cur = r.start
		default:
			it.cur = it.cur.Next()
		}
		if !it.startAt.IsValid() {
			it.startAt = it.cur
		} else if it.cur == it.startAt {
			return netip.Addr{}
		}
		if it.cur != r.gateway {
			return it.cur
		}
	}
}
