package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// inprocessEndpoint is the --cri value that runs the node's runtime in the
// daemon itself, so that the operator's walkthrough runs on a machine
// with no container runtime installed.
const inprocessEndpoint = "inprocess"

// inprocessRuntime is a CRI runtime of the daemon's own: package
// source/cri/critest's, served on a unix socket in a temporary directory
// and read through the same CRI client (cri.Lister, over gRPC) as a real
// runtime. It plays the kubelet and the runtime for the ADDs and DELs the
// daemon answers: once an ADD is acknowledged, its sandbox is listed with
// the address, as a runtime lists a sandbox once its network is set up;
// once a DEL or a GC released an entry, its sandbox is removed.
//
// A real runtime outlives the daemon, and restore in phases 0 to 2 takes
// its listing as evidence. So the sandboxes are kept in a file beside the
// checkpoint (<state>.cri-sandboxes.json), read at start and rewritten
// after every change: the daemon killed and started again finds the pods
// it left, as it would under containerd. Its methods are not safe for
// concurrent use; serve calls them from its one loop.
type inprocessRuntime struct {
	runtime *critest.Runtime
	server  *critest.Server
	path    string // the sandboxes' file
}

// sandboxRecord is one sandbox in the sandboxes' file.
type sandboxRecord struct {
	ID        string    `json:"id"`
	IPs       []string  `json:"ips"`
	CreatedAt time.Time `json:"createdAt"`
}

// inprocessSandboxes is the path of the in-process runtime's sandboxes
// beside the checkpoint at state.
func inprocessSandboxes(state string) string { return state + ".cri-sandboxes.json" }

// startInprocess starts the in-process runtime with the sandboxes its
// file beside state holds (none if there is no file yet).
func startInprocess(state string) (*inprocessRuntime, error) {
	r := &inprocessRuntime{runtime: critest.New(), path: inprocessSandboxes(state)}
	r.runtime.SetVersion("phaseshift-ipam", "inprocess (critest)")
	b, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("--cri %s: reading its sandboxes: %w", inprocessEndpoint, err)
	default:
		var recs []sandboxRecord
		if err := json.Unmarshal(b, &recs); err != nil {
			return nil, fmt.Errorf("--cri %s: its sandboxes file %s does not decode (%v): remove it to start with no pods", inprocessEndpoint, r.path, err)
		}
		for _, s := range recs {
			r.runtime.Add(critest.Sandbox{ID: s.ID, Name: s.ID, Namespace: "default", UID: "uid-" + s.ID, CreatedAt: s.CreatedAt, IPs: s.IPs})
		}
	}
	// An empty path: a new short temporary directory, removed by Close
	// (a unix socket's path has at most about 107 bytes).
	srv, err := r.runtime.Serve("")
	if err != nil {
		return nil, fmt.Errorf("--cri %s: %w", inprocessEndpoint, err)
	}
	r.server = srv
	return r, nil
}

// Endpoint is the CRI endpoint the daemon's lister dials.
func (r *inprocessRuntime) Endpoint() string { return r.server.Endpoint() }

// added lists the sandbox of an acknowledged ADD, with its addresses.
func (r *inprocessRuntime) added(id string, ips []netip.Addr) error {
	s := critest.Sandbox{ID: id, Name: id, Namespace: "default", UID: "uid-" + id, CreatedAt: time.Now()}
	for _, ip := range ips {
		s.IPs = append(s.IPs, ip.String())
	}
	r.runtime.Add(s)
	return r.save()
}

// removed removes the sandboxes of released entries.
func (r *inprocessRuntime) removed(ids ...string) error {
	for _, id := range ids {
		r.runtime.Remove(id)
	}
	return r.save()
}

// save rewrites the sandboxes' file: a temporary file renamed over it, so
// that a kill -9 leaves the old list or the new one.
func (r *inprocessRuntime) save() error {
	var recs []sandboxRecord
	for _, s := range r.runtime.Sandboxes() {
		recs = append(recs, sandboxRecord{ID: s.ID, IPs: slices.Clone(s.IPs), CreatedAt: s.CreatedAt})
	}
	b, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(r.path), "."+filepath.Base(r.path)+".new")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("--cri %s: saving its sandboxes: %w", inprocessEndpoint, err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return fmt.Errorf("--cri %s: saving its sandboxes: %w", inprocessEndpoint, err)
	}
	return nil
}

// Close stops the runtime and removes its socket's directory; the
// sandboxes' file stays, as a real runtime's pods outlive the daemon.
func (r *inprocessRuntime) Close() { r.server.Close() }
