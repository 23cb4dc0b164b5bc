// Command testsummary reads the JSON stream of go test -json on stdin
// (several go test runs one after another are fine) and prints it short:
// a line per package that passed, every skipped test with its reason
// (go test says nothing of a skip without -v), and the whole output of
// every test or build that failed. It exits 1 if anything failed, or if a
// test that a PHASESHIFT_REQUIRE_* variable makes mandatory was skipped,
// or (with -all, when the run was not narrowed by -run) did not run at
// all. ./test runs it; it uses only the standard library.
//
//	go test -json PATTERN | go run ./internal/testsummary -all
//
// # Caveats
//
//   - A skip's reason is the skipped test's own output: a test that logs
//     before it skips shows those lines too.
//   - Skips with one reason in one package are one line, naming each test.
//   - The mandatory tests are named here (required), by name: a renamed
//     one fails a full run (-all) until this list follows it.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// required are the tests a PHASESHIFT_REQUIRE_* variable set to 1 makes
// mandatory, by package and top-level test name: the variable says that
// what they need is there (.ci/run installs Prometheus and reaches the
// module proxy), so a skip of one, for any reason, is a failure.
var required = map[string][]string{
	"PHASESHIFT_REQUIRE_PROMETHEUS": {
		"github.com/phaseshift/phaseshift/examples/fleet TestFleet",
		"github.com/phaseshift/phaseshift/cmd/phaseshift TestGate",
		"github.com/phaseshift/phaseshift/metrics TestRules",
		"github.com/phaseshift/phaseshift/metrics TestRulesTestsCatchABrokenGate",
	},
	"PHASESHIFT_REQUIRE_PROXY": {
		"github.com/phaseshift/phaseshift/internal/deps TestImporterKeepsItsPins",
		"github.com/phaseshift/phaseshift/internal/deps TestImporterKeepsItsCommonPins",
		"github.com/phaseshift/phaseshift/internal/deps TestCRIImporterEndsUpWith",
	},
}

// event is one line of go test -json (cmd/test2json's TestEvent, and the
// build events go test adds since Go 1.24).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

// summary is what the stream said so far.
type summary struct {
	out      io.Writer
	getenv   func(string) string
	output   map[string][]string // by package+" "+test ("" for the package): output lines
	build    map[string][]string // by import path: build output
	result   map[string]string   // by package+" "+test: pass, fail or skip
	failed   []string
	skips    map[string][]string // by package+"\x00"+reason: the tests
	skipKeys []string            // in order of first appearance
	ok       int
}

func main() {
	all := flag.Bool("all", false, "the run was not narrowed (-run, -short): a mandatory test that did not run fails too")
	flag.Parse()
	os.Exit(summarize(os.Stdin, os.Stdout, *all, os.Getenv))
}

// summarize reads go test -json from in, prints the summary to out and
// returns the exit status; getenv reads the PHASESHIFT_REQUIRE_* variables.
func summarize(in io.Reader, out io.Writer, all bool, getenv func(string) string) int {
	s := &summary{out: out, getenv: getenv, output: map[string][]string{}, build: map[string][]string{}, result: map[string]string{}, skips: map[string][]string{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.out, sc.Text()) // not JSON: go test's own error
			continue
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading go test -json:", err)
		return 1
	}
	return s.finish(all)
}

func (s *summary) add(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "build-output":
		s.build[e.ImportPath] = append(s.build[e.ImportPath], e.Output)
	case "build-fail":
		s.failed = append(s.failed, "build of "+e.ImportPath)
		fmt.Fprintf(s.out, "FAIL build of %s\n%s", e.ImportPath, strings.Join(s.build[e.ImportPath], ""))
	case "output":
		s.output[key] = append(s.output[key], e.Output)
	case "pass", "fail", "skip":
		s.result[key] = e.Action
		s.end(e, key)
	}
}

// end reports a test or package that finished.
func (s *summary) end(e event, key string) {
	switch {
	case e.Test != "" && e.Action == "skip":
		reason := skipReason(s.output[key])
		k := e.Package + "\x00" + reason
		if _, seen := s.skips[k]; !seen {
			s.skipKeys = append(s.skipKeys, k)
		}
		s.skips[k] = append(s.skips[k], e.Test)
	case e.Test != "" && e.Action == "fail":
		s.failed = append(s.failed, e.Package+" "+e.Test)
		fmt.Fprintf(s.out, "--- FAIL: %s (%s)\n%s", e.Test, e.Package, strings.Join(s.output[key], ""))
	case e.Test == "" && e.Action == "pass":
		s.ok++
		fmt.Fprint(s.out, lastLine(s.output[key], "ok"))
	case e.Test == "" && e.Action == "fail":
		s.failed = append(s.failed, e.Package)
		// A package that failed without a failing test: a panic, a
		// timeout or a failed build; its own output says which.
		fmt.Fprintf(s.out, "FAIL %s\n%s", e.Package, strings.Join(s.output[key], ""))
	}
	if e.Test != "" && e.Action != "fail" {
		delete(s.output, key) // a test's output is kept only to show a failure
	}
}

// skipReason is what a skipped test said: its output without go test's
// own === and --- lines.
func skipReason(lines []string) string {
	var b []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		b = append(b, t)
	}
	if len(b) == 0 {
		return "(it gave no reason)"
	}
	return strings.Join(b, " ")
}

// lastLine is the package's own summary line (ok PKG TIME, with "(cached)"),
// or the package and prefix when it printed none.
func lastLine(lines []string, prefix string) string {
	for _, l := range slices.Backward(lines) {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return prefix + "\n"
}

// finish prints the skips and the mandatory tests' verdicts, and returns
// the exit status.
func (s *summary) finish(all bool) int {
	for _, k := range s.skipKeys {
		pkg, reason, _ := strings.Cut(k, "\x00")
		tests := s.skips[k]
		fmt.Fprintf(s.out, "SKIP %s %s: %s\n", pkg, strings.Join(tests, ", "), reason)
	}
	var missing []string
	for env, tests := range required {
		if s.getenv(env) != "1" {
			continue
		}
		for _, t := range tests {
			pkg, _, _ := strings.Cut(t, " ")
			switch r := s.result[t]; {
			case r == "skip":
				missing = append(missing, fmt.Sprintf("%s was skipped, and %s=1 requires it to run", t, env))
			case r == "" && all && s.result[pkg+" "] != "":
				missing = append(missing, fmt.Sprintf("%s did not run (renamed? update internal/testsummary), and %s=1 requires it to run", t, env))
			}
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		fmt.Fprintln(s.out, "FAIL", m)
	}
	fmt.Fprintf(s.out, "%d packages ok, %d skip lines above, %d failed\n", s.ok, len(s.skipKeys), len(s.failed)+len(missing))
	if len(s.failed)+len(missing) > 0 {
		return 1
	}
	return 0
}
