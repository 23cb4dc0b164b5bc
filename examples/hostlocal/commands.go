package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// errPluginNotAvailable is the CNI 1.1 code STATUS returns when the plugin
// cannot serve an ADD now.
const errPluginNotAvailable = 50

// run is every command: read the configuration, open a session (locks
// and restore), do fn, close. fn makes at most one write.
func run(args *skel.CmdArgs, cmd string, fn func(ctx context.Context, s *session) error) error {
	tr := newTracer(cmd)
	defer tr.flush()
	tr.mark("main")
	c, err := loadConfig(args.StdinData, args.Args)
	if err != nil {
		// host-local's errors as host-local returns them (skel gives a
		// plain error code 999), this plugin's own with code 7.
		return err
	}
	tr.setPhase(c.phase)
	timeout := execTimeout
	if cmd == "STATUS" {
		timeout = statusTimeout
	}
	ctx, cancel := execContext(timeout)
	defer cancel()
	s, err := openSession(ctx, c, tr)
	if err != nil {
		return cniError(err)
	}
	err = fn(ctx, s)
	tr.mark("write")
	tr.wrote(s.store)
	err = errors.Join(err, s.close())
	tr.mark("close")
	return cniError(err)
}

// cniError gives a lock that stayed taken the CNI code that tells the
// runtime to try again later; anything else is an internal error.
func cniError(err error) error {
	var e *types.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, checkpoint.ErrLocked), errors.Is(err, hostlocal.ErrLocked):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	return err
}

func attachment(args *skel.CmdArgs, c *config) key {
	return key{Network: c.network, ContainerID: args.ContainerID, IfName: args.IfName}
}

// preV080 is the key of a file host-local wrote before plugins v0.8.0,
// which recorded the container ID alone. host-local's DEL and CHECK fall
// back to it, and so does this plugin.
func preV080(k key) (key, bool) {
	if k.IfName == "" {
		return k, false
	}
	k.IfName = ""
	return k, true
}

// cmdAdd allocates one address per range set, round-robin from host-local's
// last_reserved_ip, in one Update, and prints the result.
func cmdAdd(args *skel.CmdArgs) error {
	var result *current.Result
	var cv string
	err := run(args, "ADD", func(ctx context.Context, s *session) error {
		cv = s.c.cniVersion
		var dns *types.DNS
		if s.c.resolvConf != "" {
			d, err := parseResolvConf(s.c.resolvConf)
			if err != nil {
				return err
			}
			dns = d
		}
		k := attachment(args, s.c)
		var ips []netip.Addr
		err := s.store.Update(ctx, func(tx *migrate.Tx[key, alloc]) error {
			var err error
			ips, err = newAllocator(s).allocate(tx, k)
			return err
		})
		if err != nil {
			return err
		}
		s.recordLastReserved(ips)
		result = s.c.result(ips)
		if dns != nil {
			result.DNS = *dns
		}
		return nil
	})
	if err != nil {
		return err
	}
	return types.PrintResult(result, cv)
}

// result is the CNI result of an allocation: each address with its
// subnet's mask and its range's gateway, and the configured routes.
func (c *config) result(ips []netip.Addr) *current.Result {
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion, Routes: c.routes}
	for _, ip := range ips {
		i, _ := c.rangeIndex(ip)
		rg, _ := c.ranges[i].rangeFor(ip)
		r.IPs = append(r.IPs, &current.IPConfig{
			Address: net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(rg.subnet.Bits(), ip.BitLen())},
			Gateway: rg.gateway.AsSlice(),
		})
	}
	return r
}

// recordLastReserved keeps host-local's round-robin hint in phase 3, the
// one phase that does not write host-local's files (in phases 0 to 2,
// hostlocal.Source.Put moves it as host-local's Reserve does). So the next
// allocation starts after this one whichever binary or phase makes it.
// Like host-local, it does not fsync the hint, and a hint that cannot be
// written changes only where the next search starts.
func (s *session) recordLastReserved(ips []netip.Addr) {
	if s.c.phase.WritesLegacy() {
		return
	}
	if err := os.MkdirAll(filepath.Join(s.c.dataDir, s.c.network), 0o755); err != nil {
		return
	}
	for _, ip := range ips {
		if i, ok := s.c.rangeIndex(ip); ok {
			_ = os.WriteFile(s.c.lastReservedPath(i), []byte(ip.String()), 0o600)
		}
	}
}

// cmdDel releases the attachment's addresses, or, as host-local does when
// there are none, those of a pre-v0.8.0 file naming the container alone.
// Releasing what is not allocated is not an error.
func cmdDel(args *skel.CmdArgs) error {
	return run(args, "DEL", func(ctx context.Context, s *session) error {
		k := attachment(args, s.c)
		return s.store.Update(ctx, func(tx *migrate.Tx[key, alloc]) error {
			if _, ok := tx.Get(k); ok {
				tx.Delete(k)
				return nil
			}
			if old, ok := preV080(k); ok {
				if _, ok := tx.Get(old); ok {
					tx.Delete(old)
				}
			}
			return nil
		})
	})
}

// cmdCheck checks that the attachment holds addresses and, when the
// runtime passes the previous result, that every address of it in this
// plugin's ranges is one of them.
func cmdCheck(args *skel.CmdArgs) error {
	return run(args, "CHECK", func(_ context.Context, s *session) error {
		k := attachment(args, s.c)
		a, ok := s.store.Get(k)
		if !ok {
			if old, isOld := preV080(k); isOld {
				a, ok = s.store.Get(old)
			}
		}
		if !ok {
			return fmt.Errorf("host-local: Failed to find address added by container %v", args.ContainerID)
		}
		prev, err := prevResultIPs(args.StdinData)
		if err != nil {
			return err
		}
		for _, ip := range prev {
			if _, ours := s.c.rangeIndex(ip); ours && !containsAddr(a.IPs, ip) {
				return fmt.Errorf("the previous result gives container %s, interface %s, address %s, which is not allocated to it", k.ContainerID, k.IfName, ip)
			}
		}
		return nil
	})
}

func containsAddr(ips []netip.Addr, a netip.Addr) bool {
	for _, ip := range ips {
		if ip == a {
			return true
		}
	}
	return false
}

// prevResultIPs returns the addresses of the previous result in the
// configuration (CNI 0.4.0 and later pass it to CHECK), or none.
func prevResultIPs(stdin []byte) ([]netip.Addr, error) {
	var nc types.NetConf
	if err := json.Unmarshal(stdin, &nc); err != nil {
		return nil, fmt.Errorf("network configuration: %w", err)
	}
	if nc.RawPrevResult == nil {
		return nil, nil
	}
	if err := version.ParsePrevResult(&nc); err != nil {
		return nil, fmt.Errorf("prevResult: %w", err)
	}
	res, err := current.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("prevResult: %w", err)
	}
	var out []netip.Addr
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// cmdGC releases every allocation of the network that is not one of the
// runtime's valid attachments (CNI 1.1), in one commit.
func cmdGC(args *skel.CmdArgs) error {
	return run(args, "GC", func(ctx context.Context, s *session) error {
		if !s.c.validSet {
			// A GC without the list would release every allocation.
			return types.NewError(types.ErrInvalidNetworkConfig, "GC without cni.dev/valid-attachments: the runtime must list the attachments still in use (an empty list releases every allocation)", "")
		}
		valid := make(map[types.GCAttachment]bool, len(s.c.valid))
		containers := make(map[string]bool, len(s.c.valid))
		for _, a := range s.c.valid {
			valid[a] = true
			containers[a.ContainerID] = true
		}
		_, err := s.store.DeleteFunc(ctx, func(k key, _ alloc) bool {
			if k.IfName == "" {
				// A pre-v0.8.0 allocation names its container only.
				return !containers[k.ContainerID]
			}
			return !valid[types.GCAttachment{ContainerID: k.ContainerID, IfName: k.IfName}]
		})
		return err
	})
}

// cmdStatus answers whether an ADD can succeed now: the configuration is
// valid, both locks can be taken, restore succeeds, and every range set
// has a free address. Otherwise it returns code 50 (plugin not available)
// with the reason.
func cmdStatus(args *skel.CmdArgs) error {
	err := run(args, "STATUS", func(_ context.Context, s *session) error {
		a := newAllocator(s)
		used := a.used(s.store.All(), a.n)
		for i := range s.c.ranges {
			if _, err := a.free(i, used); err != nil {
				return types.NewError(errPluginNotAvailable, err.Error(), "")
			}
		}
		return nil
	})
	var e *types.Error
	if err != nil && (!errors.As(err, &e) || e.Code == types.ErrInternal || e.Code == types.ErrTryAgainLater) {
		return types.NewError(errPluginNotAvailable, err.Error(), "")
	}
	return err
}

// fileExists reports whether a file (of any kind, readable or not) is
// named path.
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
