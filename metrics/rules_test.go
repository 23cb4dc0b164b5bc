package metrics_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	rulesFile = "phaseshift.rules.yml"
	rulesTest = "phaseshift.rules.test.yml"
)

// promtool returns the path of Prometheus's promtool, or skips the test.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH, so the rules are not tested here: install it (Debian: apt-get install prometheus), as .ci/run does")
	}
	return p
}

// runPromtool runs promtool with args in dir and returns its output and
// whether it succeeded.
func runPromtool(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "promtool %v did not run: %s", args, out)
		return string(out), false
	}
	return string(out), true
}

// TestRules: the shipped rules are valid and pass their tests (a healthy
// fleet, divergence, a checkpoint left behind legacy and healed, a
// quarantined file, a node missing).
func TestRules(t *testing.T) {
	out, ok := runPromtool(t, ".", "check", "rules", rulesFile)
	require.True(t, ok, "promtool check rules:\n%s", out)
	out, ok = runPromtool(t, ".", "test", "rules", rulesTest)
	require.True(t, ok, "promtool test rules:\n%s", out)
}

// TestRulesTestsCatchABrokenGate: the rules' tests are not vacuous. Each
// of these changes to the gate, copied beside the tests in a temporary
// directory, makes promtool test rules fail.
func TestRulesTestsCatchABrokenGate(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	tests, err := os.ReadFile(rulesTest)
	require.NoError(t, err)
	for _, c := range []struct {
		name, from, to string
	}{
		{"the phase-3 threshold raised", `kind=~"diverged|orphaned|errors"} > 0`, `kind=~"diverged|orphaned|errors"} > 1`},
		{"orphans left out of the phase-3 gate", `kind=~"diverged|orphaned|errors"}`, `kind=~"diverged|errors"}`},
		{"the mark left out", `phaseshift_checkpoint_behind{job="ipamd"} > 0`, `phaseshift_checkpoint_behind{job="ipamd"} > 1`},
		{"a stale side the restore healed blocks phase 3", `phaseshift_checkpoint_behind{job="ipamd"} > 0`, `phaseshift_restore_stale{job="ipamd"} > 0`},
		{"a skipped phase let through", `expr: phaseshift_phase{job="ipamd"} < 2`, `expr: phaseshift_phase{job="ipamd"} < 1`},
		{"quarantine ignored before phase 2", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 1`,
			`phaseshift_restore_quarantined{job="ipamd"} > 1 and phaseshift_phase{job="ipamd"} == 1`},
		{"a Store judged by another Store's phase", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 1`,
			`phaseshift_restore_quarantined{job="ipamd"} > 0 and on (job, instance) phaseshift_phase{job="ipamd"} == 1`},
		{"a node down not counted", `expr: 1 - up{job="ipamd"} > 0`, `expr: 1 - up{job="ipamd"} > 1`},
		{"an absent job not counted", `expr: absent(up{job="ipamd"})`, `expr: absent(up{job="ipamd"}) and up`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, 1, strings.Count(string(rules), c.from), "the change applies once")
			dir := t.TempDir()
			broken := strings.Replace(string(rules), c.from, c.to, 1)
			require.NoError(t, os.WriteFile(filepath.Join(dir, rulesFile), []byte(broken), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, rulesTest), tests, 0o644))
			out, ok := runPromtool(t, dir, "test", "rules", rulesTest)
			require.False(t, ok, "promtool test rules passed with %s:\n%s", c.name, out)
			assert.Contains(t, out, "FAILED")
		})
	}
}

// TestRulesNameOnlyExportedMetrics: every phaseshift_ metric the rules read
// is one a Collector exports, with the labels the rules use.
func TestRulesNameOnlyExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	exported := exportedMetrics(t)
	used := regexp.MustCompile(`\b(phaseshift_[a-z_]+)(\{[^}]*\})?`).FindAllStringSubmatch(string(rules), -1)
	require.NotEmpty(t, used)
	label := regexp.MustCompile(`([a-z_]+)\s*(=~|=|!=)`)
	for _, u := range used {
		labels, ok := exported[u[1]]
		if !assert.True(t, ok, "the rules read %s, which no Collector exports", u[1]) {
			continue
		}
		for _, l := range label.FindAllStringSubmatch(u[2], -1) {
			if l[1] != "job" && l[1] != "instance" {
				assert.Contains(t, labels, l[1], "%s has no label %s", u[1], l[1])
			}
		}
	}
}

// exportedMetrics returns the name and variable labels of every metric a
// Collector describes.
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	c := collector(t, reconciled(t))
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	// A Desc's String is the only way to read its parts: "Desc{fqName:
	// "name", help: "...", constLabels: {}, variableLabels: [a b]}", or,
	// from client_golang 1.20 (which the workspace's build list may
	// select), "variableLabels: {a,b}".
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: [\[{]([^\]}]*)[\]}]`)
	out := map[string][]string{}
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		require.NotNil(t, m, "unexpected Desc format: %s", d)
		out[m[1]] = strings.FieldsFunc(m[2], func(r rune) bool { return r == ' ' || r == ',' })
	}
	require.Len(t, out, 20)
	return out
}

// exportedNames returns the sorted names exportedMetrics finds.
func exportedNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for n := range exportedMetrics(t) {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
