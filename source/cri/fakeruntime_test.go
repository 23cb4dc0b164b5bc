package cri_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// startRuntime serves a fresh fake runtime holding sandboxes on a socket in
// a short temporary directory, stopped when the test ends.
func startRuntime(t *testing.T, sandboxes ...critest.Sandbox) (*critest.Runtime, *critest.Server) {
	t.Helper()
	rt := critest.New()
	rt.Add(sandboxes...)
	srv, err := rt.Serve("")
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return rt, srv
}

// dial returns a Lister for endpoint, closed when the test ends.
func dial(t *testing.T, endpoint string, opts ...cri.Option) *cri.Lister {
	t.Helper()
	l, err := cri.NewLister(endpoint, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// ids returns the IDs of sandboxes, in order.
func ids(sandboxes []cri.Sandbox) []string {
	out := make([]string, len(sandboxes))
	for i, s := range sandboxes {
		out[i] = s.ID
	}
	return out
}

// pod returns a ready pod sandbox with one IPv4 address.
func pod(id, ip string) critest.Sandbox {
	return critest.Sandbox{ID: id, Name: "pod-" + id, Namespace: "default", UID: "uid-" + id, IPs: []string{ip}}
}
