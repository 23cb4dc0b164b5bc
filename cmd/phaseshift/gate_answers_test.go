package main_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The gate verb against Prometheus servers that are not the real one: a
// server whose answers are malformed, empty or failed, and one whose
// targets' scrapes are staggered across the interval, on a clock of its
// own, so that what the gate waits for is the same on every run.

// promReply writes an answer of Prometheus's HTTP API.
func promReply(w http.ResponseWriter, resultType, result string) {
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":%q,"result":%s}}`, resultType, result)
}

// TestGateMalformedAnswers: whatever the server answers that is not a
// well-formed answer to the gate's question (empty, of another type,
// failed, not numbers), the gate exits 8 saying what was wrong, and never
// says "go" nor panics.
func TestGateMalformedAnswers(t *testing.T) {
	const emptyVector = `{"status":"success","data":{"resultType":"vector","result":[]}}`
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter, query string)
		say    string
	}{
		{"an empty vector to every query", func(w http.ResponseWriter, _ string) { fmt.Fprint(w, emptyVector) },
			"answered time() with a vector (0 samples), not a scalar"},
		{"an empty body", func(http.ResponseWriter, string) {}, "not Prometheus's API"},
		{"a failed query, HTTP 503", func(w http.ResponseWriter, _ string) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":"error","errorType":"unavailable","error":"the storage is not ready"}`)
		}, "refused the query time() (HTTP 503): unavailable: the storage is not ready"},
		{"a matrix", func(w http.ResponseWriter, _ string) { promReply(w, "matrix", `[]`) }, `is a "matrix", not a vector or scalar`},
		{"time() as a string", func(w http.ResponseWriter, _ string) { promReply(w, "string", `[1, "x"]`) }, `is a "string", not a vector or scalar`},
		{"time() as a vector", func(w http.ResponseWriter, _ string) { promReply(w, "vector", `[{"metric":{},"value":[1,"1"]}]`) },
			"answered time() with a vector (1 samples), not a scalar"},
		{"time() not finite", func(w http.ResponseWriter, _ string) { promReply(w, "scalar", `[1, "+Inf"]`) }, "is not a finite number"},
		{"a scalar to every query", func(w http.ResponseWriter, _ string) { promReply(w, "scalar", `[1000, "1000"]`) },
			"answered timestamp(up{job=\"ipamd\"}) with a scalar, not a vector"},
		{"a scrape time that is not a number", func(w http.ResponseWriter, q string) {
			if q == "time()" {
				promReply(w, "scalar", `[1000, "1000"]`)
				return
			}
			promReply(w, "vector", `[{"metric":{"instance":"a"},"value":[1000,"soon"]}]`)
		}, `a sample's value "soon" is not a number`},
		{"a scrape time not finite", func(w http.ResponseWriter, q string) {
			if q == "time()" {
				promReply(w, "scalar", `[1000, "1000"]`)
				return
			}
			promReply(w, "vector", `[{"metric":{"instance":"a"},"value":[1000,"NaN"]}]`)
		}, "is not a finite number"},
		{"a sample that is not a pair", func(w http.ResponseWriter, q string) {
			if q == "time()" {
				promReply(w, "scalar", `[1000, "1000"]`)
				return
			}
			promReply(w, "vector", `[{"metric":{"instance":"a"},"value":[1000]}]`)
		}, `a sample is not [time, "value"]`},
		{"the gate's answer empty", healthyBut(`phaseshift:safe_to_move_to_phase{phase="3"} or`, emptyVector),
			`has no series phaseshift:safe_to_move_to_phase{phase="3"}`},
		{"the gate's answer not 0 or 1", healthyBut(`phaseshift:safe_to_move_to_phase{phase="3"} or`,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"phaseshift:safe_to_move_to_phase","phase":"3"},"value":[1000,"0.5"]}]}}`),
			"phaseshift:safe_to_move_to_phase is 0.5, not 0 or 1"},
		{"a series the gate did not ask for", healthyBut(`phaseshift:safe_to_move_to_phase{phase="3"} or`,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up"},"value":[1000,"1"]}]}}`),
			`a series "up" the query does not select`},
		{"a blocker's value not finite", healthyBut(`phaseshift:safe_to_move_to_phase{phase="3"} or`,
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"phaseshift:node_blocks_phase","instance":"a"},"value":[1000,"NaN"]}]}}`),
			"is not a finite number"},
		{"the count of reporting nodes empty", healthyBut("count(count by (instance)", emptyVector),
			"or vector(0) with 0 samples, not one"},
		{"the count of reporting nodes negative", healthyBut("count(count by (instance)",
			`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1000,"-2"]}]}}`),
			"is -2, not a count of nodes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.answer(w, r.FormValue("query")) }))
			defer srv.Close()
			r := run(t, "gate", "--prometheus", srv.URL, "--poll", "1ms", "--timeout", "10s", "3")
			assert.Equal(t, 8, r.code, "%s%s", r.stdout, r.stderr)
			assert.Contains(t, r.stderr, c.say)
			assert.NotContains(t, r.stderr, "panic")
			assert.NotContains(t, r.stdout, "may move")
		})
	}
}

// healthyBut answers as a healthy fleet of one node at phase 2, fresh
// since the gate started, but answers the query that starts with prefix
// with body.
func healthyBut(prefix, body string) func(w http.ResponseWriter, query string) {
	var mu sync.Mutex
	evaluations := 1000.0
	return func(w http.ResponseWriter, q string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(q, prefix):
			fmt.Fprint(w, body)
		case q == "time()":
			promReply(w, "scalar", `[1000, "1000"]`)
		case strings.HasPrefix(q, "timestamp(up{"):
			promReply(w, "vector", `[{"metric":{"instance":"a"},"value":[1000,"1001"]}]`)
		case strings.HasPrefix(q, "timestamp(phaseshift:safe_to_move_to_phase"):
			evaluations++
			promReply(w, "vector", fmt.Sprintf(`[{"metric":{"phase":"3"},"value":[1000,"%g"]}]`, evaluations))
		case strings.Contains(q, "phaseshift:node_held_down"):
			promReply(w, "vector", `[{"metric":{"__name__":"phaseshift:safe_to_move_to_phase","phase":"3"},"value":[1000,"1"]}]`)
		default: // the counts
			promReply(w, "vector", `[{"metric":{},"value":[1000,"1"]}]`)
		}
	}
}

// staggeredProm is a Prometheus server on a clock of its own, as the gate
// sees it: targets scraped every second, each at its own offset spread
// across the second (as Prometheus spreads them), and the rules
// evaluated every second just before one of them. Its clock moves a tenth
// of a second between two polls of the gate (when a query it answered at
// this instant comes again), from 0.05 past a second: never to the
// instant between an evaluation and the next scrape. After limit polls it
// answers no more.
type staggeredProm struct {
	targets int
	limit   int
	phase   string

	mu    sync.Mutex      // guards now, asked and polls
	now   float64         // seconds since the epoch, on the fake's clock
	asked map[string]bool // the queries answered at now
	polls int
}

// evaluationOffset is where in each second the rules are evaluated: just
// before the scrape of the target at offset 0.5.
const evaluationOffset = 0.499

func (p *staggeredProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := r.FormValue("query")
	if p.asked[q] {
		p.now += 0.1
		p.polls++
		clear(p.asked)
	}
	p.asked[q] = true
	if p.polls >= p.limit {
		fmt.Fprintf(w, `{"status":"error","errorType":"timeout","error":"the fake's clock ran out after %d polls"}`, p.limit)
		return
	}
	latest := func(offset float64) float64 { return math.Floor(p.now-offset) + offset }
	switch {
	case q == "time()":
		promReply(w, "scalar", fmt.Sprintf(`[%f, "%f"]`, p.now, p.now))
	case strings.HasPrefix(q, "timestamp(up{"):
		var vec []string
		for i := range p.targets {
			vec = append(vec, fmt.Sprintf(`{"metric":{"instance":"node-%02d"},"value":[%f,"%f"]}`, i, p.now, latest(float64(i)/float64(p.targets))))
		}
		promReply(w, "vector", "["+strings.Join(vec, ",")+"]")
	case strings.HasPrefix(q, "timestamp(phaseshift:safe_to_move_to_phase"):
		promReply(w, "vector", fmt.Sprintf(`[{"metric":{"phase":%q},"value":[%f,"%f"]}]`, p.phase, p.now, latest(evaluationOffset)))
	case strings.Contains(q, "phaseshift:node_held_down"):
		promReply(w, "vector", fmt.Sprintf(`[{"metric":{"__name__":"phaseshift:safe_to_move_to_phase","phase":%q},"value":[%f,"1"]}]`, p.phase, p.now))
	case strings.HasPrefix(q, "count(count by (instance)"), strings.HasPrefix(q, "max(phaseshift:expected_nodes"):
		promReply(w, "vector", fmt.Sprintf(`[{"metric":{},"value":[%f,"%d"]}]`, p.now, p.targets))
	default:
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]string{"status": "error", "errorType": "bad_data", "error": "the fake does not know the query " + q})
		_, _ = w.Write(b)
	}
}

// TestGateStaggeredScrapes: with 24 targets scraped at offsets spread
// across the interval, some target is always scraped after the last
// evaluation; the gate waits for an evaluation after a time it fixed,
// not after the latest scrape of every poll, and answers within a few
// intervals of the server's clock (the fake's clock counts them: no
// timing here).
func TestGateStaggeredScrapes(t *testing.T) {
	p := &staggeredProm{targets: 24, limit: 600, now: 1_000_000.05, phase: "1", asked: map[string]bool{}}
	srv := httptest.NewServer(p)
	defer srv.Close()
	r := run(t, "gate", "--prometheus", srv.URL, "--poll", "1ms", "1")
	assert.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "the fleet may move to phase 1: no node blocks it (24 nodes report, 24 expected)")
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.LessOrEqual(t, p.polls, 50, "the gate answered after %d polls, %.1f s of the server's clock: a few intervals are enough", p.polls, float64(p.polls)/10)
}
