package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// relayPlugin is the CNI IPAM plugin that makes examples/ipam, a daemon
// answering ADD and DEL on stdin (--serve), the IPAM of containerd's pods:
// this test binary, copied into the CNI plugin directory under this name.
// Run by the bridge plugin, it passes the call to the test's relay over a
// unix socket and prints the relay's answer, so that the address a pod
// holds is the one the daemon acknowledged, and the test decides when the
// runtime learns of it.
const relayPlugin = prefix + "-relay"

// relayCall is what the plugin sends the relay: one CNI call.
type relayCall struct {
	Command     string `json:"command"` // CNI_COMMAND: ADD, DEL
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Network     string `json:"network"`
}

// relayAnswer is what the relay sends back: the CNI result to print, or
// the error to fail the call with.
type relayAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// isRelayPlugin reports whether this process runs as the relay plugin.
func isRelayPlugin() bool { return filepath.Base(os.Args[0]) == relayPlugin }

// relayPluginMain is the plugin: it reads the network configuration on
// stdin for the relay's socket, passes the call there, and prints the
// answer as the CNI spec asks (a result on stdout and exit 0, or an error
// object on stdout and exit 1).
func relayPluginMain() int {
	fail := func(err error) int {
		// Code 999 is "implementation-specific": the CNI spec keeps 1 to
		// 99 for its own errors.
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": err.Error()})
		return 1
	}
	cmd := os.Getenv("CNI_COMMAND")
	switch cmd {
	case "VERSION":
		fmt.Println(`{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}`)
		return 0
	case "ADD", "DEL":
	default:
		return 0 // CHECK, GC, STATUS: nothing to check or collect here
	}
	var conf struct {
		Name string `json:"name"`
		IPAM struct {
			Socket string `json:"socket"`
		} `json:"ipam"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&conf); err != nil {
		return fail(fmt.Errorf("%s: reading the network configuration: %w", relayPlugin, err))
	}
	conn, err := net.Dial("unix", conf.IPAM.Socket)
	if err != nil {
		return fail(fmt.Errorf("%s: the test's relay is not listening: %w", relayPlugin, err))
	}
	defer conn.Close()
	call := relayCall{Command: cmd, ContainerID: os.Getenv("CNI_CONTAINERID"), IfName: os.Getenv("CNI_IFNAME"), Network: conf.Name}
	if err := json.NewEncoder(conn).Encode(call); err != nil {
		return fail(fmt.Errorf("%s: %w", relayPlugin, err))
	}
	var ans relayAnswer
	if err := json.NewDecoder(conn).Decode(&ans); err != nil {
		return fail(fmt.Errorf("%s: no answer from the test's relay: %w", relayPlugin, err))
	}
	if ans.Error != "" {
		return fail(errors.New(ans.Error))
	}
	if len(ans.Result) > 0 {
		_, _ = os.Stdout.Write(append(ans.Result, '\n'))
	}
	return 0
}

// installRelayPlugin copies this test binary into the CNI plugin
// directory as the relay plugin.
func (n *node) installRelayPlugin() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	path := filepath.Join(n.cniBin, relayPlugin)
	tmp := path + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// relaySocket is where the relay listens for the plugin.
func (n *node) relaySocket() string { return filepath.Join(n.dir, "relay.sock") }

// acked is a CNI call the daemon acknowledged.
type acked struct {
	relayCall
	IPs []netip.Addr // an ADD's addresses
}

// held is a call the relay holds after the daemon acknowledged it: the
// plugin, and so the runtime's RunPodSandbox or StopPodSandbox, waits
// until release.
type held struct {
	acked   chan acked // the call, once the daemon acknowledged it
	release chan struct{}
}

// relay answers the relay plugin's calls with the daemon that is attached
// (examples/ipam --serve), one call at a time, as the daemon takes them.
// A call made while no daemon is attached fails (a DEL succeeds: the
// daemon it would release from is gone, and cleanup must go on).
type relay struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex // guards d and hold; held while the daemon takes a call
	d    *ipamd
	hold map[string]*held // by command: the next call of it is held
}

// startRelay listens on the relay socket until the test ends.
func (n *node) startRelay(t *testing.T) *relay {
	t.Helper()
	_ = os.Remove(n.relaySocket())
	ln, err := net.Listen("unix", n.relaySocket())
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &relay{ln: ln, hold: map[string]*held{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.serve(conn) }()
		}
	}()
	t.Cleanup(r.close)
	return r
}

// attach makes d the daemon that answers; nil detaches.
func (r *relay) attach(d *ipamd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.d = d
}

// holdNext holds the next call of command (ADD or DEL) once the daemon
// has acknowledged it.
func (r *relay) holdNext(command string) *held {
	h := &held{acked: make(chan acked, 1), release: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold[command] = h
	return h
}

// close releases every held call and stops listening.
func (r *relay) close() {
	r.mu.Lock()
	for cmd, h := range r.hold {
		h.let()
		delete(r.hold, cmd)
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}

// let releases a held call (once).
func (h *held) let() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// wait waits until the daemon has acknowledged the held call.
func (h *held) wait(ctx context.Context) (acked, error) {
	select {
	case a := <-h.acked:
		return a, nil
	case <-ctx.Done():
		return acked{}, fmt.Errorf("waiting for the daemon to acknowledge a held call: %w", ctx.Err())
	}
}

func (r *relay) serve(conn net.Conn) {
	defer conn.Close()
	var call relayCall
	if err := json.NewDecoder(conn).Decode(&call); err != nil {
		return
	}
	ans, h := r.answer(call)
	if h != nil {
		<-h.release
	}
	_ = json.NewEncoder(conn).Encode(ans)
}

// answer has the attached daemon take call; if the call is held, it
// returns the hold, whose acked channel has the call by then.
func (r *relay) answer(call relayCall) (relayAnswer, *held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.d == nil {
		if call.Command == "DEL" {
			return relayAnswer{}, nil
		}
		return relayAnswer{Error: "no ipam daemon is running"}, nil
	}
	resp, err := r.d.call(ipamRequest{Op: map[string]string{"ADD": "add", "DEL": "del"}[call.Command], ID: call.ContainerID, Network: call.Network, IfName: call.IfName})
	if err == nil && !resp.OK {
		err = errors.New(resp.Error)
	}
	if err != nil {
		return relayAnswer{Error: fmt.Sprintf("ipam daemon: %s %s: %v", call.Command, call.ContainerID, err)}, nil
	}
	var ans relayAnswer
	if call.Command == "ADD" {
		ips := make([]map[string]string, len(resp.IPs))
		for i, ip := range resp.IPs {
			ips[i] = map[string]string{"address": netip.PrefixFrom(ip, netip.MustParsePrefix(subnet).Bits()).String()}
		}
		ans.Result, _ = json.Marshal(map[string]any{"cniVersion": "1.0.0", "ips": ips})
	}
	h := r.hold[call.Command]
	if h == nil {
		return ans, nil
	}
	delete(r.hold, call.Command)
	h.acked <- acked{relayCall: call, IPs: resp.IPs}
	return ans, h
}

// ipamRequest and ipamResponse are lines of examples/ipam's --serve
// protocol.
type ipamRequest struct {
	Op      string `json:"op"`
	ID      string `json:"id,omitempty"`
	Network string `json:"network,omitempty"`
	IfName  string `json:"ifName,omitempty"`
}

type ipamResponse struct {
	OK      bool         `json:"ok"`
	Error   string       `json:"error,omitempty"`
	IPs     []netip.Addr `json:"ips,omitempty"`
	Entries []ipamEntry  `json:"entries,omitempty"`
	Report  *ipamReport  `json:"report,omitempty"`
}

// ipamd is examples/ipam running with --serve against containerd.
type ipamd struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	report ipamReport
	stderr *os.File
}

// startIPAMD starts examples/ipam --serve in phase against containerd,
// with its checkpoint at state, and waits for its restore report.
func (n *node) startIPAMD(ctx context.Context, state, phase string) (*ipamd, error) {
	logPath := filepath.Join(filepath.Dir(state), "ipamd-"+phase+".log")
	stderr, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(n.ipamBin, "--cri", "unix://"+n.sock, "--state", state, "--phase", phase,
		"--pool", subnet, "--network", network, "--serve")
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		stderr.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		stderr.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return nil, fmt.Errorf("start examples/ipam: %w", err)
	}
	d := &ipamd{cmd: cmd, in: in, out: bufio.NewScanner(out), stderr: stderr}
	d.out.Buffer(nil, 1<<20)
	first, err := d.read(ctx)
	if err == nil && (!first.OK || first.Report == nil) {
		err = fmt.Errorf("its first line is no restore report: %+v", first)
	}
	if err != nil {
		d.kill()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("examples/ipam in phase %s: %w\n%s", phase, err, log)
	}
	d.report = *first.Report
	return d, nil
}

// call sends one request and reads its answer. The relay serialises
// calls; the test makes its own only while no pod is being made.
func (d *ipamd) call(req ipamRequest) (ipamResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := json.NewEncoder(d.in).Encode(req); err != nil {
		return ipamResponse{}, err
	}
	return d.read(ctx)
}

// read reads one answer, or kills the daemon when ctx ends first (a hung
// daemon must not hang the suite).
func (d *ipamd) read(ctx context.Context) (ipamResponse, error) {
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	go func() {
		if d.out.Scan() {
			got <- line{b: append([]byte(nil), d.out.Bytes()...)}
			return
		}
		err := d.out.Err()
		if err == nil {
			err = io.EOF
		}
		got <- line{err: err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			return ipamResponse{}, fmt.Errorf("examples/ipam: %w", l.err)
		}
		var resp ipamResponse
		if err := json.Unmarshal(l.b, &resp); err != nil {
			return ipamResponse{}, fmt.Errorf("examples/ipam answered %q: %w", l.b, err)
		}
		return resp, nil
	case <-ctx.Done():
		d.kill()
		return ipamResponse{}, fmt.Errorf("examples/ipam did not answer: %w", ctx.Err())
	}
}

// served is what the daemon serves: an address per container.
func (d *ipamd) served() (map[string]netip.Addr, error) {
	resp, err := d.call(ipamRequest{Op: "dump"})
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Addr{}
	for _, e := range resp.Entries {
		if len(e.IPs) != 1 {
			return nil, fmt.Errorf("examples/ipam serves %s %d addresses", e.Key.ContainerID, len(e.IPs))
		}
		out[e.Key.ContainerID] = e.IPs[0]
	}
	return out, nil
}

// exit stops the daemon cleanly (its checkpoint's lock is released when
// it has exited).
func (d *ipamd) exit() error {
	resp, err := d.call(ipamRequest{Op: "exit"})
	if err == nil && !resp.OK {
		err = errors.New(resp.Error)
	}
	_ = d.in.Close()
	werr := d.cmd.Wait()
	d.stderr.Close()
	return errors.Join(err, werr)
}

// kill kills the daemon, for a test that failed half way.
func (d *ipamd) kill() {
	_ = d.cmd.Process.Kill()
	_ = d.in.Close()
	_ = d.cmd.Wait()
	d.stderr.Close()
}
