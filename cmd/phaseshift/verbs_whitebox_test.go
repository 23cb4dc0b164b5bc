package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verbs are listed once, by commands(). What lists them elsewhere (the
// package doc in main.go, docs/command.md, the exit meanings of the
// statuses a verb exits with) must name every one of them, in the same
// order, and nothing else (issue 42, item 6).

func verbNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// listed returns the first submatch of re on every line of text, in order.
func listed(text string, re *regexp.Regexp) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func TestPackageDocListsEveryVerb(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc := string(src[:strings.Index(string(src), "\npackage main")])
	got := listed(doc, regexp.MustCompile(`^//\tphaseshift ([a-z-]+) `))
	assert.Equal(t, verbNames(), got, "main.go's list of verbs is commands()'s")
}

func TestCommandDocListsEveryVerb(t *testing.T) {
	md, err := os.ReadFile("../../docs/command.md")
	require.NoError(t, err)
	row := regexp.MustCompile("^\\| `([a-z-]+)` \\| (.+) \\|$")
	assert.Equal(t, verbNames(), listed(string(md), row), "docs/command.md's table of verbs is commands()'s")
	summaries := map[string]string{}
	for _, line := range strings.Split(string(md), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			summaries[m[1]] = strings.ReplaceAll(m[2], "`", "") // code spans aside
		}
	}
	for _, c := range commands() {
		assert.Equal(t, c.summary, summaries[c.name], "docs/command.md gives %s's summary", c.name)
	}
}

// Each verb that can exit 7 (it takes the lock) or 9 (it refuses without a
// flag) is named in that status's meaning, and no other verb is.
func TestExitMeaningsNameTheirVerbs(t *testing.T) {
	meaning := map[int]string{}
	for _, s := range exitStatuses() {
		meaning[s.code] = s.meaning
	}
	named := func(code int, name string) bool {
		return regexp.MustCompile(`(^|[ (])` + regexp.QuoteMeta(name) + `([:,;) ]|$)`).MatchString(meaning[code])
	}
	for _, c := range commands() {
		assert.Equal(t, c.locks != lockNever, named(exitLocked, c.name), "status 7's meaning and %s", c.name)
		assert.Equal(t, c.refused != "", named(exitRefused, c.name), "status 9's meaning and %s", c.name)
	}
	for _, name := range []string{"clear-mark", "discard-empty"} {
		assert.True(t, named(exitLocked, name), "%s takes the lock", name)
		assert.True(t, named(exitRefused, name), "%s refuses", name)
	}
}

// Every verb has a --help with its usage, flags, examples of itself and
// the exit statuses; the command's --help lists every verb.
func TestEveryVerbHasHelp(t *testing.T) {
	top := usage()
	for _, c := range commands() {
		assert.Contains(t, top, "\n  "+c.name+" ", c.name)
		h := verbHelp(c)
		assert.True(t, strings.HasPrefix(h, "usage: phaseshift "+c.name+" "), c.name)
		assert.Contains(t, h, "-json", c.name)
		assert.Contains(t, h, "\nexit status:\n", c.name)
		assert.Contains(t, h, "\n  phaseshift "+c.name+" ", "%s has an example of itself", c.name)
	}
	assert.False(t, slices.Contains(verbNames(), ""), "every verb has a name")
}
