package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A client of Prometheus's HTTP API (/api/v1/query), for gate: net/http
// and encoding/json only, so that the root module, whose command this is,
// does not require the Prometheus client (its importers keep their own
// pins).

// promAPI queries one Prometheus server.
type promAPI struct {
	base   *url.URL
	client *http.Client
}

// newPromAPI checks the server's URL: http or https, a host, no query.
func newPromAPI(raw string) (*promAPI, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return nil, usageError("--prometheus %q is not the URL of a Prometheus server: give http://HOST:PORT (with its path prefix, if it has one)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &promAPI{base: u, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// sample is one element of an instant vector: its labels (the metric's
// name under __name__), its value and the time of its sample.
type sample struct {
	labels map[string]string
	value  float64
	at     float64 // seconds since the epoch
}

// apiAnswer is the API's envelope.
type apiAnswer struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// query evaluates expr now and returns its instant vector, or the scalar
// as one sample without labels.
func (p *promAPI) query(ctx context.Context, expr string) ([]sample, error) {
	u := *p.base
	u.Path += "/api/v1/query"
	u.RawQuery = url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Prometheus at %s: %w", p.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading Prometheus's answer from %s: %w", p.base, err)
	}
	var a apiAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%s answered HTTP %d, not Prometheus's API: is it a Prometheus server?", u.Redacted(), resp.StatusCode)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("the Prometheus server at %s refused the query %s: %s: %s", p.base, expr, a.ErrorType, a.Error)
	}
	return decodeResult(a.Data, expr)
}

// decodeResult reads a query's data: a vector or a scalar.
func decodeResult(data json.RawMessage, expr string) ([]sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("the answer to %s has no result", expr)
	}
	switch d.ResultType {
	case "scalar":
		var pair [2]any
		if err := json.Unmarshal(d.Result, &pair); err != nil {
			return nil, fmt.Errorf("the answer to %s is not a scalar", expr)
		}
		s, err := decodePair(pair)
		return []sample{s}, err
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vec); err != nil {
			return nil, fmt.Errorf("the answer to %s is not a vector", expr)
		}
		out := make([]sample, 0, len(vec))
		for _, e := range vec {
			s, err := decodePair(e.Value)
			if err != nil {
				return nil, fmt.Errorf("the answer to %s: %w", expr, err)
			}
			s.labels = e.Metric
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the answer to %s is a %s, not a vector or scalar", expr, d.ResultType)
}

// decodePair reads the API's [time, "value"].
func decodePair(p [2]any) (sample, error) {
	at, ok := p[0].(float64)
	text, ok2 := p[1].(string)
	if !ok || !ok2 {
		return sample{}, fmt.Errorf("a sample is not [time, \"value\"]")
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil && !strings.EqualFold(text, "NaN") {
		return sample{}, fmt.Errorf("a sample's value %q is not a number", text)
	}
	if err != nil {
		v = math.NaN()
	}
	return sample{value: v, at: at}, nil
}

// now returns the server's time, in seconds since the epoch: the gate
// compares it with sample times, which are the server's.
func (p *promAPI) now(ctx context.Context) (float64, error) {
	s, err := p.query(ctx, "time()")
	if err != nil {
		return 0, err
	}
	return s[0].value, nil
}
