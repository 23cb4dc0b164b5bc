package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// The demo plays one node through the rollout that broke the VPC CNI:
// upgrade, pods come and go, downgrade to the old binary, pods churn,
// upgrade again, onwards, a kill -9, and the contract phase. Each daemon is
// a real process (this binary with --serve) that reads CRI over a unix
// socket from a runtime in this process and keeps a real checkpoint file;
// the kill is a real SIGKILL.

// step is one start of the daemon and the pod traffic it serves.
type step struct {
	event string
	phase migrate.Phase
	// old runs the release before phaseshift (--old-binary), which never
	// opens the checkpoint: the downgrade that broke the VPC CNI. This
	// binary's own phase 0 would mark the checkpoint behind legacy.
	old  bool
	pods []string // "+a" is a CNI ADD of pod a, "-a" a DEL
	kill bool     // end with kill -9 instead of a clean exit
}

var demoSteps = []step{
	{event: "start: the old binary", phase: migrate.PhaseLegacy, old: true, pods: []string{"+a", "+b", "+c"}},
	{event: "upgrade", phase: migrate.PhaseExpand, pods: []string{"+d", "-a"}},
	{event: "downgrade", phase: migrate.PhaseLegacy, old: true, pods: []string{"-b", "+e", "+f"}},
	{event: "upgrade", phase: migrate.PhaseExpand, pods: []string{"+g"}},
	{event: "upgrade", phase: migrate.PhaseMigrate, pods: []string{"+h", "-e"}, kill: true},
	{event: "restart after kill -9", phase: migrate.PhaseMigrate, pods: []string{"-c", "+i"}},
	{event: "upgrade", phase: migrate.PhaseContract, pods: []string{"-d", "+j"}},
}

// world is what the demo knows to be true: the pods that exist and the
// address each was given.
type world struct {
	runtime *critest.Runtime
	pods    map[string]netip.Addr // container ID -> address
	adds    int
	dels    int
}

func demo(ctx context.Context, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Unix socket paths are short (108 bytes): a short temp dir.
	dir, err := os.MkdirTemp("", "phaseshift-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w := &world{runtime: critest.New(), pods: map[string]netip.Addr{}}
	w.runtime.SetVersion("containerd", "v2.1.0 (critest)")
	srv, err := w.runtime.Serve(filepath.Join(dir, "cri.sock"))
	if err != nil {
		return err
	}
	defer srv.Close()
	state := filepath.Join(dir, "state", "ipam.json")

	fmt.Fprintf(out, "phaseshift demo: one node through upgrades, a downgrade and a kill -9\n")
	fmt.Fprintf(out, "  CRI runtime: %s (in-process, 0 pods)\n", srv.Endpoint())
	fmt.Fprintf(out, "  checkpoint:  %s\n\n", state)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tEVENT\tPHASE\tREAD FROM\tSERVED\tBACKFILLED\tORPHANED\tCHECKPOINT\tCHECK")

	var failures []string
	var notes []string
	kills, orphans := 0, 0
	for i, st := range demoSteps {
		res, err := w.step(ctx, tw, self, srv.Endpoint(), state, i, st)
		if err != nil {
			tw.Flush()
			return err
		}
		failures, notes = append(failures, res.failures...), append(notes, res.notes...)
		orphans += res.orphans
		if st.kill {
			kills++
		}
	}
	// One more restart in the last phase: the last step's writes must be
	// durable too.
	d, rep, err := startDaemon(ctx, self, srv.Endpoint(), state, demoSteps[len(demoSteps)-1].phase)
	if err != nil {
		tw.Flush()
		return fmt.Errorf("final restart: %w", err)
	}
	if problems, _ := w.check(d, rep); len(problems) > 0 {
		failures = append(failures, "final restart: "+strings.Join(problems, "; "))
	}
	d.exit()
	tw.Flush()

	fmt.Fprintln(out)
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	fmt.Fprintf(out, "final restart in phase %s: %s\n\n", rep.Phase, rep.Line)
	if len(failures) > 0 {
		fmt.Fprintf(out, "verdict: FAILED\n  %s\n", strings.Join(failures, "\n  "))
		return errors.New("the node lost or duplicated an address")
	}
	served := "none assigned twice, nothing stale served"
	if orphans > 0 {
		served = fmt.Sprintf("none given to two live pods; deleted pods served as reported orphans, their addresses kept taken: %d", orphans)
	}
	fmt.Fprintf(out, "verdict: every check held: %d restarts (%d by kill -9), %d ADDs, %d DELs; no address lost, %s.\n",
		len(demoSteps)+1, kills, w.adds, w.dels, served)
	return nil
}

// stepResult is what one step of the demo found.
type stepResult struct {
	failures, notes []string
	orphans         int // deleted pods served because the report names them orphaned
}

// step starts the daemon in the step's phase, checks what it restored,
// prints the step's rows, sends it the step's pods and stops it (with
// kill -9 when the step says so).
func (w *world) step(ctx context.Context, tw io.Writer, self, endpoint, state string, i int, st step) (stepResult, error) {
	var res stepResult
	before := peek(ctx, state)
	var flags []string
	if st.old {
		flags = append(flags, "--old-binary")
	}
	d, rep, err := startDaemon(ctx, self, endpoint, state, st.phase, flags...)
	if err != nil {
		return res, fmt.Errorf("step %d (%s, phase %s): %w", i+1, st.event, st.phase, err)
	}
	problems, orphans := w.check(d, rep)
	check := "ok: " + w.summary(orphans)
	res.orphans = len(orphans)
	if len(problems) > 0 {
		check = "FAILED: " + strings.Join(problems, "; ")
		res.failures = append(res.failures, fmt.Sprintf("step %d: %s", i+1, strings.Join(problems, "; ")))
	}
	fmt.Fprintf(tw, "%d\t%s\t%d %s\t%s\t%d\t%d\t%d\t%s\t%s\n", i+1, st.event, int(st.phase), st.phase,
		rep.ReadFrom, rep.Restored, rep.Backfilled, rep.Orphaned, checkpointColumn(st.old, rep), check)
	if rep.Stale != "" {
		res.notes = append(res.notes, fmt.Sprintf("step %d: stale checkpoint: %s", i+1, rep.Stale))
		res.notes = append(res.notes, w.whatIf(before)...)
	}
	for _, o := range orphans {
		res.notes = append(res.notes, fmt.Sprintf("step %d: kept %s as an orphan, which the report names: only the checkpoint holds it, and the runtime's listing could have missed it", i+1, o))
	}
	for _, e := range rep.Errors {
		if len(orphans) > 0 && strings.Contains(e, migrate.ErrValueShared.Error()) {
			res.notes = append(res.notes, "  its address stays taken: no side says which of its holders is stale (Config.Unique), until a restore finds the other listed and held")
		}
	}
	if err := w.traffic(d, st.pods); err != nil {
		d.kill()
		return res, fmt.Errorf("step %d: %w", i+1, err)
	}
	fmt.Fprintf(tw, "\t  pods: %s%s\t\t\t\t\t\t\t\n", describe(st.pods), map[bool]string{true: ", then kill -9", false: ""}[st.kill])
	if st.kill {
		err = d.kill()
	} else {
		err = d.exit()
	}
	if err != nil {
		return res, fmt.Errorf("step %d: stopping the daemon: %w", i+1, err)
	}
	return res, nil
}

// peek reads the checkpoint as it is before a daemon starts, to tell what
// trusting it would have done. No daemon runs meanwhile, so the lock is
// free.
func peek(ctx context.Context, path string) map[Key]Alloc {
	f, err := openCheckpoint(ctx, path, checkpoint.WithLockWait(0))
	if err != nil {
		return nil
	}
	defer f.Close()
	snap, err := f.Load(ctx)
	if err != nil {
		return nil
	}
	return snap.Entries
}

// whatIf tells what serving a stale checkpoint would have done: the bug
// the VPC CNI shipped.
func (w *world) whatIf(file map[Key]Alloc) []string {
	if file == nil {
		return nil
	}
	owner := map[netip.Addr]string{}
	for id, ip := range w.pods {
		owner[ip] = id
	}
	var out []string
	inFile := map[string]bool{}
	for k, a := range file {
		inFile[k.ContainerID] = true
		if _, live := w.pods[k.ContainerID]; live {
			continue
		}
		for _, ip := range a.IPs {
			what := "leaked"
			if o, taken := owner[ip]; taken {
				what = "assigned twice: the old binary gave it to " + o
			}
			out = append(out, fmt.Sprintf("  trusting it would have kept %s (deleted) holding %s: %s", k.ContainerID, ip, what))
		}
	}
	var missing []string
	for id := range w.pods {
		if !inFile[id] {
			missing = append(missing, id)
		}
	}
	slices.Sort(out)
	slices.Sort(missing)
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("  and lost %s, whose addresses it never saw", strings.Join(missing, ", ")))
	}
	return out
}

// checkpointColumn says what this start did with the checkpoint.
func checkpointColumn(old bool, r *reportJSON) string {
	switch {
	case old:
		return "ignored (old binary)"
	case r.Behind != "":
		return "marked behind legacy"
	case r.Stale != "" && r.Rewritten:
		return "STALE: healed"
	case r.Quarantined != "":
		return "corrupt: quarantined"
	case r.Rewritten:
		return "rewritten"
	default:
		return "trusted"
	}
}

func describe(ops []string) string {
	parts := make([]string, len(ops))
	for i, op := range ops {
		verb := "ADD "
		if op[0] == '-' {
			verb = "DEL "
		}
		parts[i] = verb + op[1:]
	}
	return strings.Join(parts, ", ")
}

// summary says what a check that held found: orphans are the deleted pods
// served because the report names them orphaned (check's).
func (w *world) summary(orphans []string) string {
	if len(orphans) == 0 {
		return fmt.Sprintf("all %d pods, no IP twice", len(w.pods))
	}
	return fmt.Sprintf("all %d pods, no IP to two pods; orphaned: %s", len(w.pods), strings.Join(orphans, ", "))
}

// traffic plays CNI ADDs and DELs: the runtime creates the sandbox, the ADD
// gets it an address, the runtime records it; a DEL releases the address
// and the runtime removes the sandbox.
func (w *world) traffic(d *daemon, ops []string) error {
	for _, op := range ops {
		id := "pod-" + op[1:]
		switch op[0] {
		case '+':
			w.runtime.Add(critest.Sandbox{ID: id, Name: op[1:], Namespace: "default", UID: "uid-" + op[1:], CreatedAt: time.Now()})
			resp, err := d.call(request{Op: "add", ID: id})
			if err != nil {
				return err
			}
			if len(resp.IPs) != 1 {
				return fmt.Errorf("ADD %s got %v", id, resp.IPs)
			}
			w.runtime.SetIPs(id, resp.IPs[0].String())
			w.pods[id] = resp.IPs[0]
			w.adds++
		case '-':
			if _, err := d.call(request{Op: "del", ID: id}); err != nil {
				return err
			}
			w.runtime.Remove(id)
			delete(w.pods, id)
			w.dels++
		}
	}
	return nil
}

// check compares what the daemon serves with the pods that exist: every
// pod's address is there, nothing else is, and no address is served to two
// pods. A deleted pod served is a problem unless the restore's report
// names it orphaned (issue 41: restore keeps an entry only the checkpoint
// holds, which an observing legacy could have missed); its address may be
// a live pod's, served to both, and so not free. check returns the
// problems, and such orphans as "pod-b (10.0.0.3)".
func (w *world) check(d *daemon, rep *reportJSON) (problems, orphans []string) {
	resp, err := d.call(request{Op: "dump"})
	if err != nil {
		return []string{err.Error()}, nil
	}
	reported := map[string]bool{}
	for _, k := range rep.OrphanedKeys {
		reported[k.ContainerID] = true
	}
	orphan := func(id string) bool {
		_, live := w.pods[id]
		return !live && reported[id]
	}
	served := map[string][]netip.Addr{}
	owner := map[netip.Addr]string{}
	for _, e := range resp.Entries {
		id := e.Key.ContainerID
		served[id] = e.IPs
		for _, ip := range e.IPs {
			if other, dup := owner[ip]; dup && !orphan(other) && !orphan(id) {
				problems = append(problems, fmt.Sprintf("%s assigned to %s and %s", ip, other, id))
			}
			owner[ip] = id
		}
	}
	problems = append(problems, w.lost(served)...)
	for id, ips := range served {
		switch _, live := w.pods[id]; {
		case live:
		case orphan(id):
			orphans = append(orphans, fmt.Sprintf("%s (%s)", id, joinAddrs(ips)))
		default:
			problems = append(problems, fmt.Sprintf("%s (%v) is gone but still served", id, ips))
		}
	}
	slices.Sort(problems)
	slices.Sort(orphans)
	return problems, orphans
}

// lost says which pods are not served with the address they hold.
func (w *world) lost(served map[string][]netip.Addr) []string {
	var out []string
	for id, ip := range w.pods {
		got, ok := served[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s (%s) lost", id, ip))
		case !slices.Equal(got, []netip.Addr{ip}):
			out = append(out, fmt.Sprintf("%s served as %v, has %s", id, got, ip))
		}
	}
	return out
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// daemon is one run of the IPAM daemon in a child process.
type daemon struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startDaemon(ctx context.Context, self, endpoint, state string, p migrate.Phase, flags ...string) (*daemon, *reportJSON, error) {
	// The demo's table says what each restore did; the daemons log only
	// errors, so that their lines do not run through it.
	args := append([]string{"--serve", "--cri", endpoint, "--state", state, "--phase", p.String(), "--lock-wait", "10s", "--log-level", "error"}, flags...)
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "PHASESHIFT_IPAM_DAEMON=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	d := &daemon{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	d.out.Buffer(make([]byte, 64<<10), 16<<20)
	var first response
	if err := d.read(&first); err != nil {
		d.kill()
		return nil, nil, fmt.Errorf("the daemon did not start: %w", err)
	}
	if first.Report == nil {
		d.kill()
		return nil, nil, fmt.Errorf("the daemon did not report its restore: %s", first.Error)
	}
	return d, first.Report, nil
}

func (d *daemon) read(v *response) error {
	if !d.out.Scan() {
		if err := d.out.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	return json.Unmarshal(d.out.Bytes(), v)
}

func (d *daemon) call(req request) (response, error) {
	b, _ := json.Marshal(req)
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return response{}, err
	}
	var resp response
	if err := d.read(&resp); err != nil {
		return resp, err
	}
	if !resp.OK {
		return resp, fmt.Errorf("%s %s: %s", req.Op, req.ID, resp.Error)
	}
	return resp, nil
}

func (d *daemon) exit() error {
	if _, err := d.call(request{Op: "exit"}); err != nil {
		d.kill()
		return err
	}
	d.in.Close()
	return d.cmd.Wait()
}

// kill stops the daemon the way the OOM killer or a node problem does: no
// Close, no flush, the lock released by the kernel.
func (d *daemon) kill() error {
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	d.in.Close()
	err := d.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil // killed, as intended
	}
	return err
}
