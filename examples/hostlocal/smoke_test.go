package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	n := newNode(t)
	for _, r := range []runner{hl, ps("expand"), ps("contract")} {
		a, err := n.add(r, "c-"+r.phase+"x")
		require.NoError(t, err)
		t.Log(r, a)
	}
	t.Log(n.files())
	t.Log(n.checkpointed())
}
