package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// checkpointDir is where the checkpoints live by default, under dataDir:
// <dataDir>/.phaseshift/<network>.json. A CNI network name starts with a
// letter or digit (the specification's rule), so no network's directory
// can be ".phaseshift"; and the files stay out of the network's own
// directory, whose every file host-local reads on each ADD and DEL.
const checkpointDir = ".phaseshift"

// config is one exec's network configuration: host-local's, canonical,
// plus the phase and the checkpoint.
type config struct {
	cniVersion string
	network    string
	dataDir    string // host-local's: <dataDir>/<network> holds its files
	checkpoint string // the checkpoint file
	phase      migrate.Phase
	ranges     []rangeSet // one address is allocated from each
	routes     []*types.Route
	resolvConf string
	requested  []netip.Addr // addresses the runtime asked for, in order

	// valid is GC's list of attachments still in use; validSet says the
	// runtime sent one (an empty list releases everything).
	valid    []types.GCAttachment
	validSet bool
}

// netConfJSON is what the runtime writes on stdin: the whole network
// configuration (an IPAM plugin gets its caller's), of which host-local
// reads the name, "ipam", the runtime's capability arguments and "args".
type netConfJSON struct {
	CNIVersion    string    `json:"cniVersion"`
	Name          string    `json:"name"`
	IPAM          *ipamJSON `json:"ipam"`
	RuntimeConfig struct {
		IPRanges [][]rangeJSON `json:"ipRanges,omitempty"` // capability "ipRanges"
		IPs      []ipArg       `json:"ips,omitempty"`      // capability "ips"
	} `json:"runtimeConfig,omitempty"`
	Args *struct {
		A *struct {
			IPs []ipArg `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
	ValidAttachments *[]types.GCAttachment `json:"cni.dev/valid-attachments"`
	// The name the CNI 1.1 specification first gave the list; libcni sends
	// both (containernetworking/cni#1101).
	OldAttachments *[]types.GCAttachment `json:"cni.dev/attachments"`
}

// ipamJSON is the "ipam" section: host-local's fields (allocator.IPAMConfig),
// plus phase and checkpoint.
type ipamJSON struct {
	rangeJSON                 // the old single-range form: subnet, rangeStart, rangeEnd, gateway
	Type       string         `json:"type"`
	Routes     []*types.Route `json:"routes"`
	DataDir    string         `json:"dataDir"`
	ResolvConf string         `json:"resolvConf"`
	Ranges     [][]rangeJSON  `json:"ranges"`

	// Phase is a name or a number ("expand", 1, "1"); absent, 0: host-local's
	// behaviour. It is read after host-local's fields, so that a
	// configuration host-local refuses is refused with host-local's error.
	Phase      json.RawMessage `json:"phase"`
	Checkpoint string          `json:"checkpoint"` // absent: <dataDir>/.phaseshift/<network>.json
}

// parsePhase reads the "phase" field: a name or a number, as a JSON
// string or number.
func parsePhase(raw json.RawMessage) (migrate.Phase, error) {
	s := string(bytes.TrimSpace(raw))
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	return migrate.ParsePhase(s)
}

// ipArg is an address the runtime asks for, written as host-local's
// ip.IP (plugins pkg/ip) is: "10.1.0.5" or "10.1.0.5/24" (the prefix is
// ignored), refused with its message. An empty one is no address.
type ipArg struct{ a netip.Addr }

func (i *ipArg) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*i = ipArg{}
		return nil
	}
	s, _, _ := strings.Cut(string(b), "/")
	if strings.Contains(string(b), "/") {
		if _, err := netip.ParsePrefix(string(b)); err != nil {
			return fmt.Errorf("invalid IP address %s", b)
		}
	}
	a, err := parseAddr(s)
	if err != nil {
		return fmt.Errorf("invalid IP address %s", b)
	}
	i.a = a
	return nil
}

// envArgs is what host-local reads from CNI_ARGS: IP=<address>.
type envArgs struct {
	types.CommonArgs
	IP ipArg
}

// loadConfig reads the network configuration as host-local's
// allocator.LoadIPAMConfig does: the same fields, defaults, checks in the
// same order, and errors with the same text, which skel returns with
// host-local's CNI code (999, internal: host-local returns them as plain
// errors). Then it reads this plugin's own fields (phase, checkpoint),
// whose mistakes host-local never sees and which fail with code 7
// (invalid network configuration). cniArgs is CNI_ARGS.
func loadConfig(stdin []byte, cniArgs string) (*config, error) {
	var n netConfJSON
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, err
	}
	if n.IPAM == nil {
		return nil, errors.New("IPAM config missing 'ipam' key")
	}
	c := &config{
		cniVersion: n.CNIVersion,
		network:    n.Name,
		dataDir:    n.IPAM.DataDir,
		routes:     n.IPAM.Routes,
		resolvConf: n.IPAM.ResolvConf,
	}
	if c.dataDir == "" {
		c.dataDir = hostlocal.DefaultDataDir
	}
	if err := c.loadRequested(&n, cniArgs); err != nil {
		return nil, err
	}
	if err := c.loadRanges(&n); err != nil {
		return nil, err
	}
	if err := c.loadOwn(&n); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	switch {
	case n.ValidAttachments != nil:
		c.valid, c.validSet = *n.ValidAttachments, true
	case n.OldAttachments != nil:
		c.valid, c.validSet = *n.OldAttachments, true
	}
	return c, nil
}

// loadOwn reads what this plugin adds to host-local's configuration: the
// network name as a directory name (skel has checked it already when the
// plugin is exec'd), the phase and the checkpoint.
func (c *config) loadOwn(n *netConfJSON) error {
	if err := checkNetworkName(n.Name); err != nil {
		return err
	}
	if n.IPAM.Phase != nil {
		p, err := parsePhase(n.IPAM.Phase)
		if err != nil {
			return fmt.Errorf("ipam.phase: %w", err)
		}
		c.phase = p
	}
	c.checkpoint = n.IPAM.Checkpoint
	switch {
	case c.checkpoint == "":
		c.checkpoint = filepath.Join(c.dataDir, checkpointDir, c.network+".json")
	case !filepath.IsAbs(c.checkpoint):
		return fmt.Errorf("ipam.checkpoint %q is not an absolute path: the runtime runs plugins from any directory", c.checkpoint)
	}
	return nil
}

// checkNetworkName refuses a name that is not one directory name:
// host-local keeps the network's files in <dataDir>/<name>.
func checkNetworkName(name string) error {
	switch {
	case name == "":
		return errors.New("the network configuration has no name")
	case name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("network name %q is not a valid CNI network name (letters, digits, '_', '.', '-')", name)
	}
	return nil
}

// errEmptyIP is host-local's error for an empty address among those in
// args.cni.ips or runtimeConfig.ips (""): its canonicalizeIP of the nil
// net.IP that ip.IP gives for it.
var errEmptyIP = errors.New("cannot understand ip: IP <nil> not v4 nor v6")

// loadRequested collects the addresses the runtime asks for: CNI_ARGS
// IP=, then args.cni.ips, then runtimeConfig.ips, as host-local does.
func (c *config) loadRequested(n *netConfJSON, cniArgs string) error {
	if cniArgs != "" {
		var e envArgs
		if err := types.LoadArgs(cniArgs, &e); err != nil {
			return err
		}
		if e.IP.a.IsValid() {
			c.requested = append(c.requested, e.IP.a)
		}
	}
	var ips []ipArg
	if n.Args != nil && n.Args.A != nil {
		ips = append(ips, n.Args.A.IPs...)
	}
	ips = append(ips, n.RuntimeConfig.IPs...)
	for _, ip := range ips {
		if !ip.a.IsValid() {
			return errEmptyIP
		}
		c.requested = append(c.requested, ip.a)
	}
	return nil
}

// loadRanges builds the range sets: runtimeConfig.ipRanges first, then the
// old single range of "ipam" (when it has a subnet), then "ranges"; each
// canonical, at most one per family before CNI 0.3.0, none overlapping
// another.
func (c *config) loadRanges(n *netConfJSON) error {
	raw := append([][]rangeJSON{}, n.RuntimeConfig.IPRanges...)
	if n.IPAM.Subnet.IP != nil {
		raw = append(raw, []rangeJSON{n.IPAM.rangeJSON})
	}
	raw = append(raw, n.IPAM.Ranges...)
	if len(raw) == 0 {
		return errors.New("no IP ranges specified")
	}
	v4, v6 := 0, 0
	for i, r := range raw {
		s, err := newRangeSet(r)
		if err != nil {
			return fmt.Errorf("invalid range set %d: %w", i, err)
		}
		if s[0].start.Is4() {
			v4++
		} else {
			v6++
		}
		c.ranges = append(c.ranges, s)
	}
	if v4 > 1 || v6 > 1 {
		if ok, _ := version.GreaterThanOrEqualTo(c.cniVersion, "0.3.0"); !ok {
			return fmt.Errorf("CNI version %v does not support more than 1 address per family", c.cniVersion)
		}
	}
	for i := range c.ranges {
		for j := i + 1; j < len(c.ranges); j++ {
			if c.ranges[i].overlaps(c.ranges[j]) {
				return fmt.Errorf("range set %d overlaps with %d", i, j)
			}
		}
	}
	return nil
}

// rangeIndex returns the range set holding a: the index host-local names
// its last_reserved_ip.<index> file after.
func (c *config) rangeIndex(a netip.Addr) (int, bool) {
	for i, s := range c.ranges {
		if s.contains(a) {
			return i, true
		}
	}
	return 0, false
}

// lastReservedPath is host-local's round-robin hint for range set i.
func (c *config) lastReservedPath(i int) string {
	return filepath.Join(c.dataDir, c.network, "last_reserved_ip."+strconv.Itoa(i))
}
