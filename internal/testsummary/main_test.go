package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// stream is go test -json of a package whose test passed, one whose test
// skipped with a reason, and the gate's test skipped where Prometheus is
// missing, as go1.26 writes them.
const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestA"}
{"Action":"output","Package":"example.com/a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"example.com/a","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestA"}
{"Action":"output","Package":"example.com/a","Output":"ok  \texample.com/a\t0.01s\n"}
{"Action":"pass","Package":"example.com/a"}
{"Action":"run","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Test":"TestGate"}
{"Action":"output","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Test":"TestGate","Output":"=== RUN   TestGate\n"}
{"Action":"output","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Test":"TestGate","Output":"    gate_test.go:12: the prometheus server is not on PATH\n"}
{"Action":"output","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Test":"TestGate","Output":"--- SKIP: TestGate (0.00s)\n"}
{"Action":"skip","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Test":"TestGate"}
{"Action":"output","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift","Output":"ok  \tgithub.com/phaseshift/phaseshift/cmd/phaseshift\t0.02s\n"}
{"Action":"pass","Package":"github.com/phaseshift/phaseshift/cmd/phaseshift"}
`

func TestSkipsNameTheirReason(t *testing.T) {
	var out bytes.Buffer
	status := summarize(strings.NewReader(stream), &out, true, func(string) string { return "" })
	assert.Equal(t, 0, status, out.String())
	assert.Contains(t, out.String(), "SKIP github.com/phaseshift/phaseshift/cmd/phaseshift TestGate: gate_test.go:12: the prometheus server is not on PATH\n")
	assert.Contains(t, out.String(), "ok  \texample.com/a\t0.01s\n")
	assert.NotContains(t, out.String(), "=== RUN", "a passing test's output is not shown")
}

func TestARequiredTestThatSkipsFails(t *testing.T) {
	env := func(k string) string {
		if k == "PHASESHIFT_REQUIRE_PROMETHEUS" {
			return "1"
		}
		return ""
	}
	var out bytes.Buffer
	assert.Equal(t, 1, summarize(strings.NewReader(stream), &out, false, env), out.String())
	assert.Contains(t, out.String(), "FAIL github.com/phaseshift/phaseshift/cmd/phaseshift TestGate was skipped, and PHASESHIFT_REQUIRE_PROMETHEUS=1 requires it to run")
	// Its package ran, and the run was full: a required test missing from
	// it (renamed, deleted) fails too.
	out.Reset()
	assert.Equal(t, 1, summarize(strings.NewReader(strings.ReplaceAll(stream, `"TestGate"`, `"TestGateRenamed"`)), &out, true, env))
	assert.Contains(t, out.String(), "TestGate did not run")
}

func TestAFailureShowsItsOutput(t *testing.T) {
	failing := `{"Action":"run","Package":"example.com/b","Test":"TestB"}
{"Action":"output","Package":"example.com/b","Test":"TestB","Output":"    b_test.go:3: wrong answer\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestB"}
{"Action":"output","Package":"example.com/b","Output":"FAIL\texample.com/b\t0.01s\n"}
{"Action":"fail","Package":"example.com/b"}
{"ImportPath":"example.com/c","Action":"build-output","Output":"c.go:1: syntax error\n"}
{"ImportPath":"example.com/c","Action":"build-fail"}
`
	var out bytes.Buffer
	assert.Equal(t, 1, summarize(strings.NewReader(failing), &out, true, func(string) string { return "" }))
	assert.Contains(t, out.String(), "--- FAIL: TestB (example.com/b)\n    b_test.go:3: wrong answer\n")
	assert.Contains(t, out.String(), "FAIL build of example.com/c\nc.go:1: syntax error\n")
}
