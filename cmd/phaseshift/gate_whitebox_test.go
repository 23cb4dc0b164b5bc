package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fuzzProm answers the gate as a healthy fleet of two nodes, fresh since
// the gate started, but for its bad-th query (counted from 0), which it
// answers with body.
type fuzzProm struct {
	body []byte
	bad  int

	mu      sync.Mutex // guards queries
	queries int
}

func (p *fuzzProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	n := p.queries
	p.queries++
	p.mu.Unlock()
	if n == p.bad {
		_, _ = w.Write(p.body)
		return
	}
	// Every answer is at the server's time 1000+n: scrapes at n and
	// evaluations at n+0.5 are after the gate's start, and each poll sees
	// a later evaluation than the one before.
	now := 1000 + float64(n)
	vector := func(series ...string) {
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(series, ","))
	}
	sample := func(labels string, v float64) string {
		return fmt.Sprintf(`{"metric":{%s},"value":[%g,"%g"]}`, labels, now, v)
	}
	switch q := r.FormValue("query"); {
	case q == "time()":
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"scalar","result":[%g,"%g"]}}`, now, now)
	case strings.HasPrefix(q, "timestamp(up{"):
		vector(sample(`"instance":"a"`, now), sample(`"instance":"b"`, now))
	case strings.HasPrefix(q, "timestamp(phaseshift:safe_to_move_to_phase"):
		vector(sample(`"phase":"2"`, now+0.5))
	case strings.Contains(q, "phaseshift:node_held_down"):
		vector(sample(`"__name__":"phaseshift:safe_to_move_to_phase","phase":"2"`, 1))
	default: // the counts of nodes reporting and expected
		vector(sample("", 2))
	}
}

// FuzzGateAnswer: whatever Prometheus answers to any one of the gate's
// queries (the others answered as a healthy fleet would), the gate never
// panics and exits only with a status its documentation gives it: 0 (the
// fleet may move), 8 (the server failed, or its answer was malformed or
// empty), 9 (refused), each but 0 with a message.
func FuzzGateAnswer(f *testing.F) {
	for _, body := range []string{
		``,
		`{}`,
		`{"status":"success"}`,
		`{"status":"success","data":{"resultType":"vector","result":[]}}`,
		`{"status":"success","data":{"resultType":"vector","result":null}}`,
		`{"status":"success","data":{"resultType":"scalar","result":[1000,"1000"]}}`,
		`{"status":"success","data":{"resultType":"scalar","result":[1000]}}`,
		`{"status":"success","data":{"resultType":"matrix","result":[]}}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1000,"NaN"]}]}}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":null,"value":[1000,"-Inf"]}]}}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"phaseshift:node_held_down"},"value":[1000,"1"]}]}}`,
		`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"phaseshift:safe_to_move_to_phase"},"value":[1000,"1"]},{"metric":{"__name__":"phaseshift:safe_to_move_to_phase"},"value":[1000,"0"]}]}}`,
		`{"status":"error","errorType":"bad_data","error":"parse error"}`,
	} {
		for bad := range 6 {
			f.Add([]byte(body), uint8(bad))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, bad uint8) {
		srv := httptest.NewServer(&fuzzProm{body: body, bad: int(bad % 8)})
		defer srv.Close()
		defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		var stdout, stderr bytes.Buffer
		// A short --timeout: an answer that never lets the data become
		// fresh, or a node stay held down, ends in a refusal soon.
		code := run(context.Background(), []string{"gate", "--prometheus", srv.URL, "--poll", "1ms", "--timeout", "100ms", "2"}, nil, &stdout, &stderr)
		switch code {
		case exitOK:
			if !strings.Contains(stdout.String(), "the fleet may move to phase 2") {
				t.Fatalf("exit 0 without saying the fleet may move: %q", stdout.String())
			}
		case exitFailed, exitRefused:
			if stderr.Len() == 0 {
				t.Fatalf("exit %d without a message", code)
			}
		default:
			t.Fatalf("exit %d, which the gate's documentation does not give it: %s%s", code, stdout.String(), stderr.String())
		}
	})
}
