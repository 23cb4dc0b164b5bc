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

// The daemon's command protocol on stdin and stdout (--serve), one JSON
// object per line. It stands in for the CNI plugin binary, which would
// talk to the daemon over gRPC or a socket: what matters here is that
// every ADD and DEL is acknowledged only once it is durable.
//
//	→ {"op":"add","id":"c1"}          ← {"ok":true,"ips":["10.0.0.2"]}
//	→ {"op":"del","id":"c1"}          ← {"ok":true}
//	→ {"op":"gc","valid":[{"containerID":"c2","ifname":"eth0"}]}
//	                                  ← {"ok":true,"released":[{...}]}
//	→ {"op":"dump"}                   ← {"ok":true,"entries":[{"key":{...},"ips":[...]}]}
//	→ {"op":"exit"}                   ← {"ok":true}, then a clean exit
//
// The first line the daemon writes is its restore report.
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
	Phase       string   `json:"phase"`
	ReadFrom    string   `json:"readFrom"`
	Restored    int      `json:"restored"`
	Backfilled  int      `json:"backfilled"`
	Orphaned    int      `json:"orphaned"`
	Dropped     int      `json:"dropped"`
	Diverged    int      `json:"diverged"`
	Rewritten   bool     `json:"rewritten"`
	Stale       string   `json:"stale,omitempty"`
	Behind      string   `json:"behind,omitempty"`
	Quarantined string   `json:"quarantined,omitempty"`
	Errors      []string `json:"errors,omitempty"`
	Line        string   `json:"line"`
}

func toReportJSON(r migrate.Report[Key]) *reportJSON {
	out := &reportJSON{
		Phase: r.Phase.String(), ReadFrom: string(r.ReadFrom), Restored: r.Restored,
		Backfilled: len(r.Backfilled), Orphaned: len(r.Orphaned), Dropped: len(r.Dropped), Diverged: len(r.Diverged),
		Rewritten: r.CheckpointRewritten, Stale: r.Stale, Behind: r.Behind, Quarantined: r.Quarantined, Line: r.String(),
	}
	for _, e := range r.Errors {
		out.Errors = append(out.Errors, e.Error())
	}
	return out
}

// serve answers commands from in on out until "exit" or the end of in.
func serve(ctx context.Context, m *IPAM, rep migrate.Report[Key], network string, in io.Reader, out io.Writer) error {
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
