package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
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

// rangeJSON is a range as the network configuration writes it, in
// host-local's types (allocator.Range), so that a malformed address or
// subnet is refused by the same parser with the same message: net.IP's
// ("invalid IP address: 10.1.2") and types.IPNet's ("invalid CIDR
// address: 10.1.2.0/33").
type rangeJSON struct {
	RangeStart net.IP      `json:"rangeStart,omitempty"`
	RangeEnd   net.IP      `json:"rangeEnd,omitempty"`
	Subnet     types.IPNet `json:"subnet"`
	Gateway    net.IP      `json:"gateway,omitempty"`
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

// newRange is host-local's Range.Canonicalize, step for step and error for
// error, on the net.IP values the configuration was read into: the subnet
// must be the network address and leave at least two addresses; the
// gateway defaults to the subnet's first address, the start to the one
// after the network address, and the end to the last address (before the
// broadcast address for IPv4). As there, the start is checked against the
// end as given, so a start after the end is blamed on the start. The
// canonical range is then carried as net/netip values.
func newRange(rj rangeJSON) (addrRange, error) {
	subnetIP, err := canonicalIP(rj.Subnet.IP)
	if err != nil {
		return addrRange{}, err
	}
	mask := rj.Subnet.Mask
	subnet := &net.IPNet{IP: subnetIP, Mask: mask}
	ones, bits := mask.Size()
	if ones > bits-2 {
		return addrRange{}, fmt.Errorf("Network %s too small to allocate from", subnet)
	}
	if len(subnetIP) != len(mask) {
		return addrRange{}, fmt.Errorf("IPNet IP and Mask version mismatch")
	}
	if network := subnetIP.Mask(mask); !subnetIP.Equal(network) {
		return addrRange{}, fmt.Errorf("Network has host bits set. For a subnet mask of length %d the network address is %s", ones, network)
	}
	c := canonRange{subnet: subnet, start: rj.RangeStart, end: rj.RangeEnd}
	gateway := nextIP(subnetIP)
	if rj.Gateway != nil {
		if gateway, err = canonicalIP(rj.Gateway); err != nil {
			return addrRange{}, err
		}
	}
	if c.start != nil {
		if c.start, err = canonicalIP(c.start); err != nil {
			return addrRange{}, err
		}
		if !c.contains(c.start) {
			return addrRange{}, fmt.Errorf("RangeStart %s not in network %s", c.start, subnet)
		}
	} else {
		c.start = nextIP(subnetIP)
	}
	if c.end != nil {
		if c.end, err = canonicalIP(c.end); err != nil {
			return addrRange{}, err
		}
		if !c.contains(c.end) {
			return addrRange{}, fmt.Errorf("RangeEnd %s not in network %s", c.end, subnet)
		}
	} else {
		c.end = lastIP(subnetIP, mask)
	}
	return c.addrRange(gateway), nil
}

// canonRange is a range while newRange canonicalises it, in host-local's
// net.IP form; start and end may still be nil (not given).
type canonRange struct {
	subnet     *net.IPNet // canonical
	start, end net.IP
}

// contains is host-local's Range.Contains: the address's family and
// subnet, and not before the start or after the end, each only when set.
func (c canonRange) contains(ip net.IP) bool {
	ip, err := canonicalIP(ip)
	if err != nil || len(ip) != len(c.subnet.IP) || !c.subnet.Contains(ip) {
		return false
	}
	return (c.start == nil || cmpIP(ip, c.start) >= 0) && (c.end == nil || cmpIP(ip, c.end) <= 0)
}

func (c canonRange) addrRange(gateway net.IP) addrRange {
	ones, _ := c.subnet.Mask.Size()
	return addrRange{
		subnet:  netip.PrefixFrom(toAddr(c.subnet.IP), ones),
		start:   toAddr(c.start),
		end:     toAddr(c.end),
		gateway: toAddr(gateway),
	}
}

// canonicalIP is host-local's canonicalizeIP: an IPv4 address in its 4
// bytes, an IPv6 one in its 16, anything else (nil: not given) an error.
func canonicalIP(ip net.IP) (net.IP, error) {
	if v4 := ip.To4(); v4 != nil {
		return v4, nil
	}
	if v6 := ip.To16(); v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("IP %s not v4 nor v6", ip)
}

// cmpIP is pkg/ip.Cmp: addresses compared as numbers, an IPv4 one as its
// 32 bits.
func cmpIP(a, b net.IP) int {
	return bytes.Compare(as16(a), as16(b))
}

func as16(ip net.IP) []byte {
	if v4 := ip.To4(); v4 != nil {
		return append(make([]byte, 12, 16), v4...)
	}
	return ip.To16()
}

// nextIP is pkg/ip.NextIP: the address after ip, in ip's length.
func nextIP(ip net.IP) net.IP {
	return toAddr(ip).Next().AsSlice()
}

// lastIP is host-local's lastIP: the subnet's last address, less one for
// IPv4 (the broadcast address).
func lastIP(subnetIP net.IP, mask net.IPMask) net.IP {
	end := make(net.IP, len(subnetIP))
	for i := range subnetIP {
		end[i] = subnetIP[i] | ^mask[i]
	}
	if len(end) == net.IPv4len {
		end[3]--
	}
	return end
}

// toAddr converts a canonical net.IP (4 or 16 bytes).
func toAddr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
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
