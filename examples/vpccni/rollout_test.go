package vpccni_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
)

// old is a step of the released ipamd: their JSONFile alone.
const old = migrate.Phase(-1)

// TestRollout drives ipamd's real DataStore across a rollout and back:
// the released binary, this library's phases 0 to 3, the released binary
// again between them, and ADDs and DELs at every step. After every start,
// what ReadBackingStore restored must be exactly what was acknowledged,
// each address held once; after the old binary's DEL b, ADD f, which
// hands f b's address, the next start must serve f alone with it (were b
// restored too, ipamd's ReadBackingStore would panic "addr already
// assigned", as it did at every restart of the issue 32 adapter).
func TestRollout(t *testing.T) {
	steps := []struct {
		phase migrate.Phase
		ops   string // "+c" ADDs c, "-c" DELs it
	}{
		{old, "+a +b +c"},
		{migrate.PhaseLegacy, "-a +d"},
		{migrate.PhaseExpand, "+e"},
		{old, "-b +f"},
		{migrate.PhaseMigrate, "+j"},
		{migrate.PhaseContract, "+g -c"},
		{migrate.PhaseMigrate, "-d"},
		{migrate.PhaseExpand, "+h"},
		{old, "+i -j"},
		{migrate.PhaseExpand, "-e"},
		{migrate.PhaseMigrate, "+k"},
		{migrate.PhaseContract, "-f"},
		{migrate.PhaseContract, ""},
	}
	n := newNode(t)
	want := map[string]string{} // container -> address, as acknowledged
	freed := map[string]string{}
	for i, st := range steps {
		name := fmt.Sprintf("step %d (%s)", i+1, phaseName(st.phase))
		var backing datastore.Checkpointer = datastore.NewJSONFile(n.legacy)
		var closer func() error
		if st.phase != old {
			cp := n.open(t, st.phase)
			backing, closer = cp, cp.Close
		}
		ds, err := n.start(t, backing, 15) // one prefix
		require.NoError(t, err, "%s: ReadBackingStore", name)
		require.Equal(t, want, allocated(ds), "%s: restored", name)
		for _, o := range strings.Fields(st.ops) {
			c := o[1:]
			if o[0] == '-' {
				freed[c] = unassign(t, ds, c)
				delete(want, c)
				continue
			}
			ip := assign(t, ds, c)
			for other, held := range want {
				require.NotEqual(t, held, ip, "%s: %s was given %s's address", name, c, other)
			}
			want[c] = ip
		}
		if st.ops == "-b +f" {
			require.Equal(t, freed["b"], want["f"], "the old binary hands f the address b freed")
		}
		if closer != nil {
			require.NoError(t, closer())
		}
	}
	assert.Equal(t, []string{"g", "h", "i", "k"}, sortedKeys(want))
}

func phaseName(p migrate.Phase) string {
	if p == old {
		return "the released ipamd"
	}
	return fmt.Sprintf("phase %d", int(p))
}
