package vpccni_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/examples/vpccni"
	"github.com/phaseshift/phaseshift/migrate"
)

// cardDataStore is network card card's DataStore over backing, with an
// ENI and a /28 of its own, as ipamd's InitializeDataStores makes one per
// network card.
func cardDataStore(t *testing.T, n *node, backing datastore.Checkpointer, card int) *datastore.DataStore {
	t.Helper()
	ds := datastore.NewDataStore(n.log, backing, true, card)
	eni := []string{"eni-0000000000000000a", "eni-0000000000000000b"}[card]
	require.NoError(t, ds.AddENI(eni, 0, card == 0, false, false, 0, "subnet-1"))
	_, cidr, err := net.ParseCIDR([]string{"10.1.0.0/28", "10.2.0.0/28"}[card])
	require.NoError(t, err)
	require.NoError(t, ds.AddIPv4CidrToStore(eni, *cidr, true))
	return ds
}

// openCard opens card's Checkpointer where ipamd's InitializeDataStores
// makes its JSONFile: over ipam.json for card 0, ipam-nic-N.json for card
// N, with the checkpoint path left to follow it.
func openCard(t *testing.T, n *node, p migrate.Phase, card int) *vpccni.Checkpointer {
	t.Helper()
	path := filepath.Join(n.dir, "ipam.json")
	if card > 0 {
		path = filepath.Join(n.dir, "ipam-nic-1.json")
	}
	cp, err := vpccni.Open(context.Background(), vpccni.Config{Phase: p, LegacyPath: path, Version: "test"})
	require.NoError(t, err)
	return cp
}

// TestEveryNetworkCardKeepsItsAllocations: ipamd v1.23.1 makes one
// DataStore per network card (InitializeDataStores), each over a JSONFile
// of its own; adopting phaseshift there gives each card its own
// Checkpointer, over that card's file, and each keeps its allocations
// across a restart. (Found by a review: the adoption read as one
// Checkpointer for ipamd, and a Checkpointer given to two cards' DataStores
// let card 0's Checkpoint remove card 1's allocations; that is refused
// now, see TestOneCheckpointerForTwoCardsIsRefused.)
func TestEveryNetworkCardKeepsItsAllocations(t *testing.T) {
	n := newNode(t)
	cps := []*vpccni.Checkpointer{openCard(t, n, migrate.PhaseMigrate, 0), openCard(t, n, migrate.PhaseMigrate, 1)}
	cards := []*datastore.DataStore{cardDataStore(t, n, cps[0], 0), cardDataStore(t, n, cps[1], 1)}
	for _, ds := range cards {
		require.NoError(t, ds.ReadBackingStore(false))
	}
	ip1 := assign(t, cards[1], "on-card-1")
	ip0 := assign(t, cards[0], "on-card-0")
	for _, cp := range cps {
		require.NoError(t, cp.Close())
	}
	require.FileExists(t, filepath.Join(n.dir, "ipam.phaseshift.json"))
	require.FileExists(t, filepath.Join(n.dir, "ipam-nic-1.phaseshift.json"))

	got := map[string]string{}
	for card := range 2 {
		cp := openCard(t, n, migrate.PhaseMigrate, card)
		defer cp.Close()
		ds := cardDataStore(t, n, cp, card)
		require.NoError(t, ds.ReadBackingStore(false))
		for c, ip := range allocated(ds) {
			got[c] = ip
		}
	}
	assert.Equal(t, map[string]string{"on-card-0": ip0, "on-card-1": ip1}, got, "what the restart restored")
}

// TestOneCheckpointerForTwoCardsIsRefused: a Checkpointer given to two
// DataStores (two network cards) would let each card's Checkpoint, the
// card's whole state, replace the other's allocations: the second
// ReadBackingStore fails instead, naming the fix.
func TestOneCheckpointerForTwoCardsIsRefused(t *testing.T) {
	n := newNode(t)
	cp := n.open(t, migrate.PhaseMigrate)
	defer cp.Close()
	require.NoError(t, cardDataStore(t, n, cp, 0).ReadBackingStore(false))
	err := cardDataStore(t, n, cp, 1).ReadBackingStore(false)
	require.ErrorIs(t, err, vpccni.ErrShared)
	assert.Contains(t, err.Error(), "ipam-nic-N.json")
}
