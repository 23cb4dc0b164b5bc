package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri"
)

const envPhase = "PHASESHIFT_PHASE"

// config is what the command line says.
type config struct {
	phase    migrate.Phase
	endpoint string
	state    string
	pool     netip.Prefix
	network  string
	serve    bool
	strict   bool
	logLevel zapcore.Level
	lockWait time.Duration
	// oldBinary plays the release before phaseshift: phase 0 without the
	// checkpoint.
	oldBinary bool
	metrics   string // listen address of /metrics; empty: none
	control   bool   // with serve: the Store on its control socket
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("ipam", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `ipam: an ipamd-style allocator moving its state from CRI to a checkpoint.

With no flags it plays the demo: one node through upgrades, a downgrade and
a kill -9, against an in-process CRI runtime, and checks at every step that
no address is lost or assigned twice.

With --cri it restores on a real node (phase from --phase or %s,
phase 0 by default; a file STATE.phase beside the checkpoint overrides
both on its node), prints what it restored and from where, and exits:

  ipam --cri unix:///run/containerd/containerd.sock --state /var/run/ipam.json --phase expand

With --serve as well it stays up and answers ADD/DEL commands on stdin,
and with --metrics as well it serves Prometheus metrics while it does:

  ipam --cri unix:///run/containerd/containerd.sock --serve --metrics :9100

--cri inprocess runs a CRI runtime of its own instead, for a machine with
none installed: it lists a sandbox for every ADD the daemon acknowledged,
removes it at the DEL, and keeps them in STATE.cri-sandboxes.json, so that
they outlive the daemon as a real runtime's pods do:

  ipam --cri inprocess --state /tmp/ipam/state.json --phase migrate --serve --control-socket

Every other flag needs --cri, and --metrics and --control-socket need
--serve: a flag that would be ignored is an error.

%s
Flags:
`, envPhase, serveProtocol)
		fs.PrintDefaults()
	}
	c := config{logLevel: zapcore.InfoLevel}
	phase := migrate.PhaseLegacy
	if env := os.Getenv(envPhase); env != "" {
		p, err := migrate.ParsePhase(env)
		if err != nil {
			return c, fmt.Errorf("%s: %w", envPhase, err)
		}
		phase = p
	}
	fs.TextVar(&c.phase, "phase", phase, "rollout phase: 0/legacy, 1/expand, 2/migrate, 3/contract (default from "+envPhase+", else 0; the file STATE.phase overrides both)")
	fs.BoolVar(&c.oldBinary, "old-binary", false, "play the release before phaseshift: phase 0 that never opens the checkpoint (so it cannot mark it) and exports no phaseshift metrics; for the demo and the fleet test, never for a rollback")
	fs.StringVar(&c.endpoint, "cri", "", "CRI endpoint of the node's runtime, e.g. unix:///run/containerd/containerd.sock, or "+inprocessEndpoint+" for a runtime of its own (no runtime installed); empty plays the demo")
	fs.StringVar(&c.state, "state", "/var/run/phaseshift-ipam/ipam.json", "checkpoint file")
	pool := fs.String("pool", "10.0.0.0/24", "address pool (the node's pod CIDR)")
	fs.StringVar(&c.network, "network", "demo-net", "CNI network name of new allocations")
	fs.BoolVar(&c.serve, "serve", false, "after restoring, answer ADD/DEL commands on stdin (JSON lines), as the demo's daemon does")
	fs.BoolVar(&c.strict, "error-on-failure-to-restore", false, "fail on anything restore cannot read, instead of logging it and going on")
	fs.TextVar(&c.logLevel, "log-level", zapcore.InfoLevel, "log to stderr from this level on: debug, info, warn or error")
	verbose := fs.Bool("v", false, "log at debug level (--log-level debug)")
	fs.DurationVar(&c.lockWait, "lock-wait", 5*time.Second, "how long to wait for another instance to release the checkpoint")
	fs.StringVar(&c.metrics, "metrics", "", "with --cri and --serve, serve Prometheus metrics (package metrics) on this address (e.g. :9100) at /metrics")
	fs.BoolVar(&c.control, "control-socket", false, "with --cri and --serve, serve the store on --state's control socket (<state>.control.sock, owner-only) for the phaseshift command's list, get and delete")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *verbose {
		c.logLevel = zapcore.DebugLevel
	}
	p, err := netip.ParsePrefix(*pool)
	if err != nil {
		return c, fmt.Errorf("--pool: %w", err)
	}
	c.pool = p.Masked()
	return c, usable(fs, c)
}

// usable refuses a combination of flags of which one would be ignored:
// without --cri ipam plays the demo, which takes no flags, and without
// --serve it restores, prints and exits, leaving nothing to scrape.
func usable(fs *flag.FlagSet, c config) error {
	var set []string
	fs.Visit(func(f *flag.Flag) { set = append(set, "--"+f.Name) })
	switch {
	case c.endpoint == "" && slices.Contains(set, "--cri"):
		return errors.New("--cri: no endpoint given (e.g. unix:///run/containerd/containerd.sock)")
	case c.endpoint == "" && len(set) > 0:
		return fmt.Errorf("%s: only with --cri (without it ipam plays the demo, which takes no flags)", strings.Join(set, ", "))
	case c.metrics != "" && !c.serve:
		return errors.New("--metrics: only with --serve (without it ipam restores, prints what it restored and exits: nothing would be scraped)")
	case c.control && !c.serve:
		return errors.New("--control-socket: only with --serve (without it ipam restores, prints what it restored and exits: nothing would answer the socket)")
	case c.oldBinary && c.phase != migrate.PhaseLegacy:
		return fmt.Errorf("--old-binary: the release before phaseshift runs phase 0 only, not %d (%s): leave --phase out", int(c.phase), c.phase)
	case c.oldBinary && c.control:
		return errors.New("--control-socket: not with --old-binary (the release before phaseshift served none)")
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "ipam:", err)
		return 2
	}
	if c.endpoint == "" {
		if err := demo(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "ipam demo:", err)
			return 1
		}
		return 0
	}
	if err := node(ctx, c, stdin, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "ipam:", err)
		return 1
	}
	return 0
}

// node restores on a node (real, or the demo's) and then either prints
// what it restored or serves commands.
func node(ctx context.Context, c config, stdin io.Reader, stdout, stderr io.Writer) error {
	log := newLogger(c.logLevel, stderr)
	defer log.Sync()
	if !c.oldBinary {
		p, err := phaseOverride(c.state, c.phase, log)
		if err != nil {
			return err
		}
		c.phase = p
	}
	endpoint, rt, err := runtimeEndpoint(c)
	if err != nil {
		return err
	}
	if rt != nil {
		defer rt.Close()
	}
	lister, err := cri.NewLister(endpoint, cri.WithLogger(log))
	if err != nil {
		return err
	}
	defer lister.Close()
	m, rep, err := Open(ctx, Options{
		Phase: c.phase, OldBinary: c.oldBinary, Lister: lister, StatePath: c.state, Pool: c.pool, Strict: c.strict,
		Logger: log, LockWait: c.lockWait, WriterName: "phaseshift-ipam-example",
	})
	if err != nil {
		return err
	}
	defer m.Close()
	if c.serve {
		if c.metrics != "" {
			stop, err := serveMetrics(c.metrics, m.Metrics(), stderr)
			if err != nil {
				return err
			}
			defer stop()
		}
		if c.control {
			// Closed before m (defers run last first): the socket never
			// outlives the Store, nor the checkpoint's lock.
			srv, err := m.ServeControl(c.state, rep, log)
			if err != nil {
				return err
			}
			defer srv.Close()
		}
		var tell sandboxes
		if rt != nil {
			tell = rt
		}
		return serve(ctx, m, rep, c.network, tell, stdin, stdout)
	}
	fmt.Fprintln(stdout, rep)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tNETWORK\tIFNAME\tIPS\tALLOCATED")
	entries := m.Entries()
	keys := make([]Key, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	for _, k := range keys {
		a := entries[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", k.ContainerID, k.Network, k.IfName, a.IPs, a.Allocated.Format(time.RFC3339))
	}
	return tw.Flush()
}

// runtimeEndpoint is the CRI endpoint the daemon reads: --cri's, or, with
// --cri inprocess, that of a runtime it starts itself, which the caller
// closes.
func runtimeEndpoint(c config) (string, *inprocessRuntime, error) {
	if c.endpoint != inprocessEndpoint {
		return c.endpoint, nil, nil
	}
	rt, err := startInprocess(c.state)
	if err != nil {
		return "", nil, err
	}
	return rt.Endpoint(), rt, nil
}

// newLogger logs to w from level on, one line per entry with its fields
// as JSON (the Report's keys are the JSON phaseshift takes).
func newLogger(level zapcore.Level, w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.CallerKey, enc.StacktraceKey = "", ""
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(core)
}

// phaseOverride returns the phase this node runs: the one the node-local
// file <state>.phase names (a phase's number or name, as --phase takes),
// when it is there, and p otherwise. It is how one node of a DaemonSet,
// which gives every node the same phase, runs another for a heal (the
// README walks one): written on the state's hostPath, it outlives the
// pod, and is removed by hand when the heal is done.
func phaseOverride(state string, p migrate.Phase, log *zap.Logger) (migrate.Phase, error) {
	path := state + ".phase"
	b, err := readOverride(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("the node-local phase override %s: %w (remove it, or write the phase into a regular file there)", path, err)
	}
	o, err := migrate.ParsePhase(strings.TrimSpace(string(b)))
	if err != nil {
		// ParsePhase's error quotes its input, which is not ours to print.
		return p, fmt.Errorf("the node-local phase override %s does not name a phase (0 to 3, or legacy, expand, migrate, contract): remove the file to run the phase of --phase or %s", path, envPhase)
	}
	if o != p {
		log.Warn("a node-local override sets the phase: remove the file when its heal is done",
			zap.String("override", path), zap.Stringer("phase", o), zap.Stringer("phaseOtherwise", p))
	}
	return o, nil
}

// overrideMax is the most an override file holds: a phase's name, and a
// newline.
const overrideMax = 64

// readOverride reads the override at path as the library opens its own
// files beside the checkpoint: without following a symlink or blocking on
// a FIFO, and only a regular file, of at most overrideMax bytes.
func readOverride(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errors.New("it is a symlink, which is not followed")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("it is not a regular file (mode %v)", fi.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, overrideMax+1))
	if err != nil {
		return nil, err
	}
	if len(b) > overrideMax {
		return nil, fmt.Errorf("it holds more than the %d bytes a phase's name takes", overrideMax)
	}
	return b, nil
}
