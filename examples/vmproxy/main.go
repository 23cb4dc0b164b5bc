package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
)

// phaseEnv is the environment variable that gives the phase when --phase
// does not, so that a DaemonSet or unit file can roll phases without
// changing the command line.
const phaseEnv = "PHASESHIFT_PHASE"

// shutdownGrace is how long a clean shutdown waits for connections to
// finish the request they are handling.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command line, parsed.
type options struct {
	socket    string
	state     string
	phase     migrate.Phase
	strict    bool
	lockWait  time.Duration
	logLevel  zapcore.Level
	logFormat string
	control   bool // the store on --state's control socket, for the phaseshift command
}

// parseFlags reads args, then the environment for what args leave unset.
// It returns flag.ErrHelp for -h.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	o := options{phase: migrate.PhaseContract, logLevel: zapcore.InfoLevel}
	fs := flag.NewFlagSet("vmproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", "/run/vmproxy/proxy.sock", "control socket `path` (unix socket, mode 0600)")
	fs.StringVar(&o.state, "state", "/run/vmproxy/state.json", "checkpoint `file` the state survives restarts in")
	fs.TextVar(&o.phase, "phase", o.phase, "migration `phase`: legacy (0), expand (1), migrate (2) or contract (3); overrides $"+phaseEnv)
	fs.BoolVar(&o.strict, "error-on-failure-to-restore", false, "exit if any of the saved state cannot be restored, leaving the file untouched\n(default: log it, set the unreadable part aside and start with the rest)")
	fs.DurationVar(&o.lockWait, "lock-wait", 5*time.Second, "how long to wait for another instance to release --state before failing")
	fs.TextVar(&o.logLevel, "log-level", o.logLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "log `format`: json or console")
	fs.BoolVar(&o.control, "control-socket", false, "serve the store on --state's control socket (<state>.control.sock, owner-only) for the phaseshift command's list, get and delete")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: vmproxy [flags]

vmproxy keeps a registry of VMs, their I/O tokens and sessions, serves it on a
unix socket (one JSON request per line) and stores every change in --state, so
that a proxy killed at any instant restarts with everything it acknowledged.

  echo '{"op":"register","vm":"vm-1","console":"/run/vc/vm-1/console.sock"}' | socat - UNIX-CONNECT:/run/vmproxy/proxy.sock

Ops: register, attach, token, open, close, unregister, list. The phase comes
from --phase, else $%s, else contract. See "go doc" for the protocol.

Flags:
`, phaseEnv)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("unexpected argument %q: vmproxy takes flags only", fs.Arg(0))
	}
	phaseSet := false
	fs.Visit(func(f *flag.Flag) { phaseSet = phaseSet || f.Name == "phase" })
	if env := getenv(phaseEnv); env != "" && !phaseSet {
		p, err := migrate.ParsePhase(env)
		if err != nil {
			return o, fmt.Errorf("$%s: %w", phaseEnv, err)
		}
		o.phase = p
	}
	if o.logFormat != "json" && o.logFormat != "console" {
		return o, fmt.Errorf("--log-format %q: use json or console", o.logFormat)
	}
	if o.lockWait < 0 {
		return o, fmt.Errorf("--lock-wait %v: must not be negative", o.lockWait)
	}
	return o, nil
}

// newLogger logs to w. Unsampled: every mutation is a line, and dropping
// lines from an audit trail under load is the wrong trade.
func newLogger(w io.Writer, o options) *zap.Logger {
	var enc zapcore.Encoder
	if o.logFormat == "console" {
		enc = zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	} else {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), o.logLevel))
}

// run is the daemon: it returns the exit code, 0 after a clean shutdown
// (ctx done), 1 when it cannot start or serve, 2 for a bad command line.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "vmproxy: %v\n", err)
		return 2
	}
	log := newLogger(stderr, o)
	defer func() { _ = log.Sync() }()
	log.Info("starting", zap.String("writer", writer()), zap.Stringer("phase", o.phase),
		zap.String("state", o.state), zap.String("socket", o.socket), zap.Bool("errorOnFailureToRestore", o.strict))

	p, _, err := openProxy(ctx, o.state, o.lockWait, proxyConfig{Phase: o.phase, Strict: o.strict, Logger: log})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		fmt.Fprintf(stderr, "vmproxy: %s\n", explain(err, o))
		return 1
	}
	ln, err := listen(o.socket)
	if err != nil {
		_ = p.Close()
		log.Error("cannot start", zap.Error(err))
		fmt.Fprintf(stderr, "vmproxy: %v\n", err)
		return 1
	}
	var ctl *control.Server[string, VM]
	if o.control {
		if ctl, err = control.Listen(control.SocketPath(o.state), p.store, control.WithLogger(log)); err != nil {
			_ = ln.Close()
			_ = p.Close()
			log.Error("cannot start", zap.Error(err))
			fmt.Fprintf(stderr, "vmproxy: %v\n", err)
			return 1
		}
	}
	srv := newServer(context.WithoutCancel(ctx), p, ln, log)
	served := make(chan error, 1)
	go func() { served <- srv.serve() }()
	log.Info("serving", zap.String("socket", o.socket), zap.Int("vms", p.store.Len()))

	code := 0
	select {
	case <-ctx.Done():
		log.Info("shutting down")
		srv.shutdown(shutdownGrace)
		<-served
	case err := <-served:
		log.Error("serving failed; shutting down", zap.Error(err))
		srv.shutdown(shutdownGrace)
		code = 1
	}
	if ctl != nil {
		if err := ctl.Close(); err != nil {
			log.Error("closing the control socket", zap.Error(err))
		}
	}
	// The sockets went first (shutdown removes them), the lock goes last:
	// once the lock is released a new instance may create its own socket
	// at the same path, which removing ours afterwards would delete.
	if err := p.Close(); err != nil {
		log.Error("closing the state", zap.Error(err))
		code = 1
	}
	log.Info("stopped")
	return code
}

// explain turns a start-up failure into what an operator reads on stderr:
// what went wrong, with the path, and what to do about it.
func explain(err error, o options) string {
	var b strings.Builder
	switch {
	case errors.Is(err, checkpoint.ErrLocked):
		fmt.Fprintf(&b, "%v\nanother vmproxy owns %s: stop it first, or give this one another --state (waited %v, see --lock-wait)", err, o.state, o.lockWait)
	case errors.Is(err, migrate.ErrStale):
		fmt.Fprintf(&b, "%v\na phase-0 (legacy) run kept its changes in memory only, so %s no longer matches what the proxy served; run once with --phase migrate, which starts from what legacy knows (nothing, after a restart), then return to --phase contract", err, o.state)
	case o.strict && (errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrBadEntry) ||
		errors.Is(err, checkpoint.ErrNewerSchema) || errors.Is(err, checkpoint.ErrOlderSchema)):
		fmt.Fprintf(&b, "cannot restore the state from %s, and --error-on-failure-to-restore is set: %v\n", o.state, err)
		fmt.Fprintf(&b, "the file was left untouched. Look at it (jq . %s), then either:\n", o.state)
		fmt.Fprintf(&b, "  - restart without --error-on-failure-to-restore: the unreadable file or entries are moved aside to %s.corrupt-<time> and the proxy starts with what it can read;\n", o.state)
		if _, err := os.Stat(o.state + ".prev"); err == nil {
			fmt.Fprintf(&b, "  - or put the previous version back (phaseshift restore-prev %s), which lacks the last change (and is marked so: a phase-3 start refuses it until a phase-2 run) and keeps this file as %s.before-restore-prev-<time>;\n", o.state, o.state)
		}
		fmt.Fprintf(&b, "  - or move it aside (mv %s %s.bad) to start empty", o.state, o.state)
	default:
		fmt.Fprintf(&b, "cannot start on %s: %v", o.state, err)
	}
	return b.String()
}
