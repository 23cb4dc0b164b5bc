package metrics_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gateDoc returns docs/gate.md, the reference the README links for the
// metrics and the rules.
func gateDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "gate.md"))
	require.NoError(t, err, "docs/gate.md is at the root of the repository, beside this module")
	return string(b)
}

// listed returns the sorted, distinct phaseshift_ names re finds in text.
func listed(t *testing.T, text string, re *regexp.Regexp) []string {
	t.Helper()
	var names []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	require.NotEmpty(t, names, "no metric found by %s", re)
	slices.Sort(names)
	return slices.Compact(names)
}

// TestGateDocShowsTheRulesFile: the documented gate is the rules file
// itself, shown whole, byte for byte: no second copy to drift.
func TestGateDocShowsTheRulesFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	assert.Contains(t, gateDoc(t), "```yaml\n"+string(rules)+"```\n",
		"docs/gate.md must show metrics/%s exactly; paste it again", rulesFile)
}

// TestGateDocListsEveryMetric: docs/gate.md's table of metrics names
// exactly those a Collector exports.
func TestGateDocListsEveryMetric(t *testing.T) {
	assert.Equal(t, exportedNames(t), listed(t, gateDoc(t), regexp.MustCompile("(?m)^\\| `(phaseshift_[a-z_]+)`")))
}

// TestDocListsEveryMetric: so does the package doc.
func TestDocListsEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	assert.Equal(t, exportedNames(t), listed(t, string(doc), regexp.MustCompile(`(?m)^//\t(phaseshift_[a-z_]+)`)))
}
