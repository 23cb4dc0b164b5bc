package hostlocal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertJSONRoundTrip checks that v decodes back from its JSON as itself,
// which a checkpoint requires of its keys and values.
func assertJSONRoundTrip[T any](t *testing.T, v T) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var back T
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, v, back, "%s", b)
}
