package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/migrate"
)

// request is one line of the daemon's command protocol on stdin (--serve),
// which serveProtocol, printed by --help and in the README, documents: it
// stands in for the CNI plugin binary, which would talk to the daemon over
// gRPC or a socket; what matters here is that every ADD and DEL is
// acknowledged only once it is durable.
type request struct {
	Op string `json:"op"`
	ID string `json:"id,omitempty"`
	// Network and IfName default to the demo's network and eth0.
	Network string `json:"network,omitempty"`
	IfName  string `json:"ifName,omitempty"`
	// Pod is the pod of an ADD, when the runtime says.
	Pod PodRef `json:"pod,omitzero"`
	// Valid is a GC's list of the attachments still in use.
	Valid []Attachment `json:"valid,omitempty"`
}

type response struct {
	OK      bool         `json:"ok"`
	Error   string       `json:"error,omitempty"`
	IPs     []netip.Addr `json:"ips,omitempty"`
	Entries []entryJSON  `json:"entries,omitempty"`
	// Released is what a GC released.
	Released []Key         `json:"released,omitempty"`
	Report   *reportJSON   `json:"report,omitempty"`
	Counts   *countersJSON `json:"counts,omitempty"`
}

type entryJSON struct {
	Key Key          `json:"key"`
	IPs []netip.Addr `json:"ips"`
}

type countersJSON struct{ Adds, Dels int }

// reportJSON is the part of migrate.Report the demo shows.
type reportJSON struct {
	Phase      string `json:"phase"`
	ReadFrom   string `json:"readFrom"`
	Restored   int    `json:"restored"`
	Backfilled int    `json:"backfilled"`
	Orphaned   int    `json:"orphaned"`
	// OrphanedKeys are the orphaned entries' keys: served though only the
	// checkpoint holds them.
	OrphanedKeys []Key    `json:"orphanedKeys,omitempty"`
	Dropped      int      `json:"dropped"`
	Diverged     int      `json:"diverged"`
	Rewritten    bool     `json:"rewritten"`
	Stale        string   `json:"stale,omitempty"`
	Behind       string   `json:"behind,omitempty"`
	Quarantined  string   `json:"quarantined,omitempty"`
	Errors       []string `json:"errors,omitempty"`
	Line         string   `json:"line"`
}

func toReportJSON(r migrate.Report[Key]) *reportJSON {
	out := &reportJSON{
		Phase: r.Phase.String(), ReadFrom: string(r.ReadFrom), Restored: r.Restored,
		Backfilled: len(r.Backfilled), Orphaned: len(r.Orphaned), Dropped: len(r.Dropped), Diverged: len(r.Diverged),
		Rewritten: r.CheckpointRewritten, Stale: r.Stale, Behind: r.Behind, Quarantined: r.Quarantined, Line: r.String(),
		OrphanedKeys: r.Orphaned,
	}
	for _, e := range r.Errors {
		out.Errors = append(out.Errors, e.Error())
	}
	return out
}

// serveProtocol is the --serve protocol as --help prints it; the README's
// section on examples/ipam shows the same, and protocol_test.go holds both
// to what the daemon answers.
const serveProtocol = `With --serve, ipam reads one JSON object per line on stdin and answers each
with one JSON line on stdout, in order. The first line it writes, before
reading any, is its restore report ({"ok":true,"report":{...}}); by then
its control socket (--control-socket) and /metrics (--metrics) are up.

  {"op":"add","id":"c1"}                 {"ok":true,"ips":["10.0.0.2"]}
  {"op":"del","id":"c1"}                 {"ok":true}
  {"op":"gc","valid":[{"containerID":"c2","ifname":"eth0"}]}
                                         {"ok":true,"released":[{...}]}
  {"op":"dump"}                          {"ok":true,"entries":[{"key":{...},"ips":[...]}],"counts":{...}}
  {"op":"exit"}                          {"ok":true}, then a clean exit

add and del also take "network" (default: --network) and "ifName"
(default: eth0), and add a "pod" ({"namespace":...,"name":...}). An
answer is written only once the change is durable on every side the phase
writes. A request that fails answers {"ok":false,"error":"..."}, and the
daemon reads on; the end of stdin stops it as exit does.
`

// sandboxes is the runtime an in-process daemon (--cri inprocess) keeps
// in step with what it acknowledges; nil under a real runtime, which
// learns of sandboxes from the kubelet.
type sandboxes interface {
	added(id string, ips []netip.Addr) error
	removed(ids ...string) error
}

// serve answers commands from in on out until "exit" or the end of in.
// rt, when not nil, is told of every acknowledged ADD and release.
func serve(ctx context.Context, m *IPAM, rep migrate.Report[Key], network string, rt sandboxes, in io.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	if err := enc.Encode(response{OK: true, Report: toReportJSON(rep)}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	var counts countersJSON
	for sc.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp = response{Error: "bad request: " + err.Error()}
		} else {
			resp = handle(ctx, m, req, network, &counts)
			if resp.OK && rt != nil {
				resp = tellRuntime(rt, req, resp)
			}
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if req.Op == "exit" {
			return nil
		}
	}
	return sc.Err()
}

// tellRuntime lists or removes the sandboxes of an acknowledged request in
// the in-process runtime, as a runtime does after the CNI call returns. A
// failure is the runtime's, not the store's: the answer says both.
func tellRuntime(rt sandboxes, req request, resp response) response {
	var err error
	switch req.Op {
	case "add":
		err = rt.added(req.ID, resp.IPs)
	case "del":
		err = rt.removed(req.ID)
	case "gc":
		ids := make([]string, len(resp.Released))
		for i, k := range resp.Released {
			ids[i] = k.ContainerID
		}
		err = rt.removed(ids...)
	}
	if err != nil {
		return response{Error: fmt.Sprintf("%s %s is durable in the store, but the in-process runtime did not record it: %v", req.Op, req.ID, err)}
	}
	return resp
}

func handle(ctx context.Context, m *IPAM, req request, network string, counts *countersJSON) response {
	key := Key{Network: req.Network, ContainerID: req.ID, IfName: req.IfName}
	if key.Network == "" {
		key.Network = network
	}
	if key.IfName == "" {
		key.IfName = "eth0"
	}
	switch req.Op {
	case "add":
		a, err := m.Add(ctx, key, req.Pod)
		if err != nil {
			return response{Error: err.Error()}
		}
		counts.Adds++
		return response{OK: true, IPs: a.IPs}
	case "del":
		if err := m.Del(ctx, key); err != nil {
			return response{Error: err.Error()}
		}
		counts.Dels++
		return response{OK: true}
	case "gc":
		released, err := m.GC(ctx, req.Valid)
		if err != nil {
			return response{Error: err.Error()}
		}
		counts.Dels += len(released)
		return response{OK: true, Released: released}
	case "dump":
		var es []entryJSON
		for k, v := range m.Entries() {
			es = append(es, entryJSON{Key: k, IPs: v.IPs})
		}
		slices.SortFunc(es, func(a, b entryJSON) int { return strings.Compare(a.Key.ContainerID, b.Key.ContainerID) })
		return response{OK: true, Entries: es, Counts: counts}
	case "exit":
		return response{OK: true}
	}
	return response{Error: fmt.Sprintf("unknown op %q: use add, del, gc, dump or exit", req.Op)}
}
