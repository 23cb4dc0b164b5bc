package main_test

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad input: a clear message, the usage line, exit 2, and nothing read.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no verb", nil, "usage: phaseshift VERB"},
		{"unknown verb", []string{"frobnicate", "x"}, `unknown verb "frobnicate": run phaseshift --help`},
		{"missing PATH", []string{"verify"}, "missing PATH"},
		{"missing KEY", []string{"get", "/x"}, "missing KEY"},
		{"missing A and B", []string{"diff"}, "missing A and B"},
		{"too many", []string{"verify", "/a", "/b"}, "too many arguments"},
		{"empty PATH", []string{"list", ""}, "PATH is empty"},
		{"unknown flag", []string{"verify", "--frob", "/x"}, "flag provided but not defined: -frob"},
		{"flag of another verb", []string{"verify", "--lock-wait", "1s", "/x"}, "flag provided but not defined: -lock-wait"},
		{"bad flag value", []string{"delete", "--lock-wait", "soon", "/x", `"k"`}, "invalid value \"soon\" for flag -lock-wait"},
		{"negative lock wait", []string{"restore-prev", "--lock-wait", "-1s", "/x"}, "--lock-wait -1s is negative"},
		{"bad key", []string{"delete", "/x", `{"a":`}, "KEY: the key is not valid JSON"},
		{"reseal without the flag", []string{"reseal", "/x"}, "--i-edited-this-file-by-hand"},
		{"missing COPY", []string{"restore-kept", "/x"}, "missing COPY"},
		{"repair-journal of two paths", []string{"repair-journal", "/a", "/b"}, "too many arguments"},
		{"flag of another repair", []string{"repair-journal", "--replace-intact", "/x"}, "flag provided but not defined: -replace-intact"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			assert.Equal(t, 2, r.code)
			assert.Contains(t, r.stderr, tc.want)
			assert.Contains(t, r.stderr, "usage: phaseshift")
			assert.Empty(t, r.stdout)
		})
	}
}

// --help, for the command and for each verb, prints examples and exits 0.
func TestHelp(t *testing.T) {
	// A flag each verb's --help shows. The verbs are the ones --help
	// lists (commands(), the one list): a verb missing here fails.
	flags := map[string]string{"verify": "-schema", "inspect": "-schema", "list": "-ignore-checksum",
		"get": "-ignore-checksum", "diff": "-values", "delete": "-lock-wait", "restore-prev": "-accept-loss", "reseal": "-i-edited-this-file-by-hand",
		"restore-kept": "-accept-loss", "repair-journal": "-drop-damaged-records", "report": "-json", "prune-orphans": "-yes",
		"clear-mark": "-legacy-current", "discard-empty": "-lock-wait", "gate": "-prometheus"}
	var verbs []string
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := run(t, args...)
		assert.Equal(t, 0, r.code)
		assert.Contains(t, r.stdout, "exit status:")
		assert.Contains(t, r.stdout, "examples:")
		verbs = helpVerbs(r.stdout)
	}
	require.NotEmpty(t, verbs)
	for _, verb := range verbs {
		assert.Contains(t, flags, verb, "the help test lacks the verb %s", verb)
	}
	assert.Len(t, flags, len(verbs), "the help test names a verb --help does not list")
	for _, verb := range verbs {
		flag := flags[verb]
		r := run(t, verb, "--help")
		assert.Equal(t, 0, r.code, verb)
		assert.Contains(t, r.stdout, "usage: phaseshift "+verb)
		assert.Contains(t, r.stdout, "\nexamples:\n", verb)
		assert.Contains(t, r.stdout, "\n  phaseshift "+verb+" ", verb)
		assert.Contains(t, r.stdout, flag, verb)
		assert.Contains(t, r.stdout, "-json", verb)

		r2 := run(t, "help", verb)
		assert.Equal(t, r.stdout, r2.stdout)
	}
	r := run(t, "delete", "--help")
	assert.Contains(t, r.stdout, "(default 5s)")
}

// The exit statuses are written once, in the code; --help and every verb's
// --help print that table, and the table in docs/command.md must say the
// same (markdown code spans aside).
func TestExitStatusesInTheDocs(t *testing.T) {
	help := exitTable(t, run(t, "--help").stdout, regexp.MustCompile(`^  (\d+)  (.+)$`), "exit status:")
	require.NotEmpty(t, help)
	for i, s := range help {
		assert.Equal(t, i, s.code, "the statuses are numbered from 0 without gaps")
	}
	assert.Equal(t, help, exitTable(t, run(t, "verify", "--help").stdout, regexp.MustCompile(`^  (\d+)  (.+)$`), "exit status:"),
		"a verb's --help prints the same table")

	doc, err := os.ReadFile("../../docs/command.md")
	require.NoError(t, err)
	md := exitTable(t, strings.ReplaceAll(string(doc), "`", ""), regexp.MustCompile(`^\| (\d+) \| (.+) \|$`), "| exit | meaning |")
	assert.Equal(t, help, md, "the table of exit statuses in docs/command.md is the command's")
}

// helpVerbs returns the verbs the command's --help lists, in order.
func helpVerbs(help string) []string {
	var verbs []string
	_, list, _ := strings.Cut(help, "\nverbs:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			verbs = append(verbs, f[0])
		}
	}
	return verbs
}

type exitRow struct {
	code    int
	meaning string
}

// exitTable reads the rows that follow the line title, up to the first
// line that is not a row.
func exitTable(t *testing.T, text string, row *regexp.Regexp, title string) []exitRow {
	t.Helper()
	var rows []exitRow
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !in {
			in = line == title
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		code, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		rows = append(rows, exitRow{code, m[2]})
	}
	return rows
}
