package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/migrate"
)

// TestGCByVeth ports the VPC CNI's
// TestDataStore_normalizeCheckpointDataByPodVethExistence
// (pkg/ipamd/datastore/data_store_test.go): the same allocations, pods and
// host links, and the same outcomes. Allocations whose pod has a host-side
// veth are kept; one whose veth is gone is released; one without pod
// metadata is kept; a failed listing of the links releases nothing and
// returns the error.
func TestGCByVeth(t *testing.T) {
	const (
		qqbdh = "5a1f9118a7125f87b4b0f2f601c0b55cfab8bcf28963bcf7c4ece3109a8b6b86"
		ns9b  = "b4729ce84caa9e585c2ba84fc9f9a058f4cf783292a84608f717035e09553422"
		bare  = "d0437ce84caa9e585c2ba84fc9f9a058f4cf783292a84608f717035e0952341"
	)
	key := func(id string) Key { return Key{Network: "aws-cni", ContainerID: id, IfName: "eth0"} }
	seed := func(t *testing.T, m *IPAM) {
		t.Helper()
		ctx := context.Background()
		_, err := m.Add(ctx, key(qqbdh), PodRef{Namespace: "kube-system", Name: "coredns-57ff979f67-qqbdh"})
		require.NoError(t, err)
		_, err = m.Add(ctx, key(ns9b), PodRef{Namespace: "kube-system", Name: "coredns-57ff979f67-8ns9b"})
		require.NoError(t, err)
		_, err = m.Add(ctx, key(bare), PodRef{})
		require.NoError(t, err)
	}
	links := func(names ...string) func() ([]string, error) {
		return func() ([]string, error) { return names, nil }
	}
	for _, c := range []struct {
		name     string
		links    func() ([]string, error)
		released []string
		err      string
	}{
		{"all allocations are valid", links("eth0", "enib5faff8a083", "eni9571956a6cc"), nil, ""},
		{"some allocations are invalid and some allocation don't have metadata", links("eth0", "enib5faff8a083", "enicc21c2d7785"), []string{ns9b}, ""},
		{"netlink list failed", func() ([]string, error) { return nil, errors.New("netlink failed") }, nil, "netlink failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, l := runtimeFor(t)
			m, _ := open(t, migrate.PhaseContract, l, filepath.Join(t.TempDir(), "ipam.json"))
			seed(t, m)
			released, err := m.GCByVeth(context.Background(), c.links)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				assert.Len(t, m.Entries(), 3, "nothing is released")
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, k := range released {
				ids = append(ids, k.ContainerID)
			}
			assert.Equal(t, c.released, ids)
			for _, id := range []string{qqbdh, ns9b, bare} {
				_, kept := m.Entries()[key(id)]
				assert.Equal(t, !slices.Contains(c.released, id), kept, "%s", id[:8])
			}
		})
	}
}

// TestGC is CNI 1.1's GC: every allocation not among the valid attachments
// is released in one commit; an entry learned from CRI, whose interface is
// not known, is kept while its container has a valid attachment.
func TestGC(t *testing.T) {
	ctx := context.Background()
	_, l := runtimeFor(t)
	state := filepath.Join(t.TempDir(), "ipam.json")
	m, _ := open(t, migrate.PhaseMigrate, l, state)
	for _, id := range []string{"c1", "c2", "c3"} {
		_, err := m.Add(ctx, realKey(id), PodRef{})
		require.NoError(t, err)
	}
	released, err := m.GC(ctx, []Attachment{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c3", IfName: "eth0"}})
	require.NoError(t, err)
	assert.Equal(t, []Key{realKey("c2")}, released)
	assert.Len(t, m.Entries(), 2)

	released, err = m.GC(ctx, nil)
	require.NoError(t, err)
	assert.Len(t, released, 2, "no valid attachment: everything goes")
	assert.Empty(t, m.Entries())
}

// TestAddIsGroupCommitted: concurrent ADDs through Update never hand out an
// address twice.
func TestAddIsGroupCommitted(t *testing.T) {
	ctx := context.Background()
	_, l := runtimeFor(t)
	m, _, err := Open(ctx, Options{Phase: migrate.PhaseContract, Lister: l, StatePath: filepath.Join(t.TempDir(), "ipam.json"),
		Pool: netip.MustParsePrefix("10.1.0.0/24"), Logger: zap.NewNop()})
	require.NoError(t, err)
	defer m.Close()
	errs := make(chan error, 40)
	for i := range 40 {
		go func() {
			_, err := m.Add(ctx, realKey(fmt.Sprint("p", i)), PodRef{})
			errs <- err
		}()
	}
	for range 40 {
		require.NoError(t, <-errs)
	}
	seen := map[netip.Addr]string{}
	for k, a := range m.Entries() {
		for _, ip := range a.IPs {
			other, dup := seen[ip]
			require.False(t, dup, "%s given to %s and %s", ip, other, k.ContainerID)
			seen[ip] = k.ContainerID
		}
	}
	assert.Len(t, seen, 40)
}
