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

// mutations are changes to the rules, each of which the rules' tests must
// catch: at least one per rule (TestEveryRuleIsMutated).
var mutations = []struct {
	name, from, to string
}{
	// Who reports.
	{"a node down not counted", `expr: 1 - up{job="ipamd"} > 0`, `expr: 1 - up{job="ipamd"} > 1`},
	{"a node without phaseshift metrics let through", `expr: up{job="ipamd"} == 1 unless`, `expr: up{job="ipamd"} == 2 unless`},
	{"an absent job not counted", `expr: absent(up{job="ipamd"})`, `expr: absent(up{job="ipamd"}) and up`},
	{"a scraped node without metrics counted as reporting", `count by (job, instance) (phaseshift_phase{job="ipamd"})`, `count by (job, instance) (up{job="ipamd"})`},
	{"no node reporting at all not counted as missing", `or on (job) 0 * max by (job) (phaseshift:expected_nodes{job="ipamd"})) > 0`, `) > 0`},
	{"no expected count let through", `expr: absent(phaseshift:expected_nodes{job="ipamd"})`, `expr: absent(phaseshift:expected_nodes{job="ipamd"}) and up`},
	// The hold-down.
	{"no hold-down", `phaseshift_scrapes_total{job="ipamd"} < 2`, `phaseshift_scrapes_total{job="ipamd"} < 1`},
	{"the hold-down left out of phase 1", `{phase="1"} or phaseshift:node_unreported or phaseshift:node_held_down)`, `{phase="1"} or phaseshift:node_unreported)`},
	{"the hold-down left out of phase 2", `{phase="2"} or phaseshift:node_unreported or phaseshift:node_held_down)`, `{phase="2"} or phaseshift:node_unreported)`},
	{"the hold-down left out of phase 3", `{phase="3"} or phaseshift:node_unreported or phaseshift:node_held_down)`, `{phase="3"} or phaseshift:node_unreported)`},
	{"the unreported left out of phase 3", `{phase="3"} or phaseshift:node_unreported or`, `{phase="3"} or`},
	// What blocks each phase.
	{"a partial listing at phase 0 let through", `kind="errors"} > 0 and ignoring (kind) phaseshift_phase{job="ipamd"} == 0`, `kind="errors"} > 0 and ignoring (kind) phaseshift_phase{job="ipamd"} == 5`},
	{"a jump from phase 0 to 2 let through", `expr: phaseshift_phase{job="ipamd"} < 1`, `expr: phaseshift_phase{job="ipamd"} < 0`},
	{"a partial listing at phase 1 let through", `kind="errors"} > 0 and ignoring (kind) phaseshift_phase{job="ipamd"} == 1`, `kind="errors"} > 0 and ignoring (kind) phaseshift_phase{job="ipamd"} == 5`},
	{"quarantine ignored before phase 2", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 1`,
		`phaseshift_restore_quarantined{job="ipamd"} > 1 and phaseshift_phase{job="ipamd"} == 1`},
	{"a Store judged by another Store's phase", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 1`,
		`phaseshift_restore_quarantined{job="ipamd"} > 0 and on (job, instance) phaseshift_phase{job="ipamd"} == 1`},
	{"a skipped phase let through", `expr: phaseshift_phase{job="ipamd"} < 2`, `expr: phaseshift_phase{job="ipamd"} < 1`},
	{"the phase-3 threshold raised", `kind=~"diverged|orphaned|errors"} > 0`, `kind=~"diverged|orphaned|errors"} > 1`},
	{"orphans left out of the phase-3 gate", `kind=~"diverged|orphaned|errors"}`, `kind=~"diverged|errors"}`},
	{"the mark left out", `phaseshift_checkpoint_behind{job="ipamd"} > 0`, `phaseshift_checkpoint_behind{job="ipamd"} > 1`},
	{"a stale side the restore healed blocks phase 3", `phaseshift_checkpoint_behind{job="ipamd"} > 0`, `phaseshift_restore_stale{job="ipamd"} > 0`},
	{"quarantine ignored before phase 3", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 2`,
		`phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 5`},
	{"the phase-1 gate ignores its blockers", `count(phaseshift:node_blocks_phase{phase="1"} or`, `count(phaseshift:node_blocks_phase{phase="5"} or`},
	{"the phase-2 gate ignores its blockers", `count(phaseshift:node_blocks_phase{phase="2"} or`, `count(phaseshift:node_blocks_phase{phase="5"} or`},
	{"the phase-3 gate ignores its blockers", `count(phaseshift:node_blocks_phase{phase="3"} or`, `count(phaseshift:node_blocks_phase{phase="5"} or`},
	// Phase 3 watched.
	{"legacy differing at phase 3 unwatched", `phaseshift_restore_shadow_differs{job="ipamd"} > 0`, `phaseshift_restore_shadow_differs{job="ipamd"} > 1`},
	{"a backfill at phase 3 unwatched", `kind="backfilled"} > 0`, `kind="backfilled"} > 5`},
	{"quarantine at phase 3 unwatched", `phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 3`,
		`phaseshift_restore_quarantined{job="ipamd"} > 0 and phaseshift_phase{job="ipamd"} == 5`},
	// The alerts, their for: and their summaries.
	{"no alert for a node without metrics", `expr: phaseshift:node_unreported{reason=~"down|no_metrics"}`, `expr: phaseshift:node_unreported{reason=~"down"}`},
	{"a node down for minutes never alerts", "reason=~\"down|no_metrics\"}\n        for: 30s", "reason=~\"down|no_metrics\"}\n        for: 10m"},
	{"no alert for missing nodes", `expr: phaseshift:node_unreported{reason=~"absent|missing|no_expected_count"}`, `expr: phaseshift:node_unreported{reason=~"absent|no_expected_count"}`},
	{"missing nodes for minutes never alert", "missing|no_expected_count\"}\n        for: 30s", "missing|no_expected_count\"}\n        for: 10m"},
	{"the missing alert names no count", `{{ if eq $labels.reason "missing" }}{{ $value }} of`, `{{ if eq $labels.reason "missing" }}some of`},
	{"no phase-1 alert", `max(phaseshift_phase{job="ipamd"}) == 1`, `max(phaseshift_phase{job="ipamd"}) == 5`},
	{"no phase-2 alert", `max(phaseshift_phase{job="ipamd"}) == 2`, `max(phaseshift_phase{job="ipamd"}) == 5`},
	{"no phase-3 alert", `max(phaseshift_phase{job="ipamd"}) == 3`, `max(phaseshift_phase{job="ipamd"}) == 5`},
	{"a phase-3 alert that waits 15 minutes", "max(phaseshift_phase{job=\"ipamd\"}) == 3\n        for: 0s", "max(phaseshift_phase{job=\"ipamd\"}) == 3\n        for: 15m"},
	{"the not-ready alert names no kind", `for phase 1, which the fleet runs ({{ $labels.reason }}{{ with $labels.kind }} {{ . }}{{ end }}`, `for phase 1, which the fleet runs ({{ $labels.reason }}`},
	{"the not-ready alert names no instance", `summary: '{{ $labels.instance }} is not ready for phase 3`, `summary: 'a node is not ready for phase 3`},
	{"phase 3 unwatched by the alert", `expr: phaseshift:node_unsafe_in_phase3`, `expr: phaseshift:node_unsafe_in_phase3 > 5`},
	{"the phase-3 watch waits", "expr: phaseshift:node_unsafe_in_phase3\n        for: 0s", "expr: phaseshift:node_unsafe_in_phase3\n        for: 15m"},
	{"the phase-3 alert names no instance", `summary: '{{ $labels.instance }} runs phase 3`, `summary: 'a node runs phase 3`},
	{"no alert for orphans at phase 2", `kind=~"diverged|orphaned"} > 0`, `kind=~"diverged|orphaned"} > 5`},
	{"no alert for divergence at phase 1", `(phaseshift_phase{job="ipamd"} == 1 or`, `(phaseshift_phase{job="ipamd"} == 5 or`},
	{"no alert for a quarantine", "expr: phaseshift_restore_quarantined{job=\"ipamd\"} > 0\n", "expr: phaseshift_restore_quarantined{job=\"ipamd\"} > 1\n"},
}

// TestRulesTestsCatchABrokenGate: the rules' tests are not vacuous. Each
// of the mutations, copied beside the tests in a temporary directory,
// makes promtool test rules fail.
func TestRulesTestsCatchABrokenGate(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	tests, err := os.ReadFile(rulesTest)
	require.NoError(t, err)
	for _, c := range mutations {
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

// TestEveryRuleIsMutated: every recording and alerting rule of the file
// has at least one mutation, so that no rule is left untested.
func TestEveryRuleIsMutated(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	starts := regexp.MustCompile(`(?m)^      - (record|alert): `).FindAllStringIndex(string(rules), -1)
	require.Len(t, starts, 28, "the rules file's rules")
	for i, st := range starts {
		end := len(rules)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		rule := string(rules[st[0]:end])
		covered := slices.ContainsFunc(mutations, func(m struct{ name, from, to string }) bool { return strings.Contains(rule, m.from) })
		assert.True(t, covered, "no mutation changes rule %d:\n%s", i+1, rule)
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
	require.Len(t, out, 21)
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
