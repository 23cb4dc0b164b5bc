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

// vector evaluates expr now and returns its instant vector. An answer of
// another type, or with a value that is not a finite number, is an error
// (a timestamp, a count or a rule's 0 or 1 never is one).
func (p *promAPI) vector(ctx context.Context, expr string) ([]sample, error) {
	kind, samples, err := p.query(ctx, expr)
	if err != nil {
		return nil, err
	}
	if kind != "vector" {
		return nil, fmt.Errorf("the Prometheus server at %s answered %s with a %s, not a vector: is it a Prometheus server?", p.base, expr, kind)
	}
	return samples, finite(samples, expr)
}

// now returns the server's time, in seconds since the epoch: the gate
// compares it with sample times, which are the server's.
func (p *promAPI) now(ctx context.Context) (float64, error) {
	const expr = "time()"
	kind, samples, err := p.query(ctx, expr)
	if err != nil {
		return 0, err
	}
	if kind != "scalar" || len(samples) != 1 {
		return 0, fmt.Errorf("the Prometheus server at %s answered %s with a %s (%d samples), not a scalar: is it a Prometheus server?", p.base, expr, kind, len(samples))
	}
	return samples[0].value, finite(samples, expr)
}

// finite returns an error if a sample's value is NaN or infinite.
func finite(samples []sample, expr string) error {
	for _, s := range samples {
		if math.IsNaN(s.value) || math.IsInf(s.value, 0) {
			return fmt.Errorf("the answer to %s: a sample's value %g is not a finite number", expr, s.value)
		}
	}
	return nil
}

// query evaluates expr now and returns the type of its result and its
// samples: a vector's, or the scalar as one sample without labels.
func (p *promAPI) query(ctx context.Context, expr string) (string, []sample, error) {
	u := *p.base
	u.Path += "/api/v1/query"
	u.RawQuery = url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("asking Prometheus at %s: %w", p.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", nil, fmt.Errorf("reading Prometheus's answer from %s: %w", p.base, err)
	}
	var a apiAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return "", nil, fmt.Errorf("%s answered HTTP %d, not Prometheus's API: is it a Prometheus server?", u.Redacted(), resp.StatusCode)
	}
	if a.Status != "success" {
		return "", nil, fmt.Errorf("the Prometheus server at %s refused the query %s (HTTP %d): %s: %s", p.base, expr, resp.StatusCode, a.ErrorType, a.Error)
	}
	return decodeResult(a.Data, expr)
}

// decodeResult reads a query's data: a vector or a scalar.
func decodeResult(data json.RawMessage, expr string) (string, []sample, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return "", nil, fmt.Errorf("the answer to %s has no result", expr)
	}
	switch d.ResultType {
	case "scalar":
		var pair [2]any
		if err := json.Unmarshal(d.Result, &pair); err != nil {
			return "", nil, fmt.Errorf("the answer to %s is not a scalar", expr)
		}
		s, err := decodePair(pair)
		if err != nil {
			return "", nil, fmt.Errorf("the answer to %s: %w", expr, err)
		}
		return d.ResultType, []sample{s}, nil
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &vec); err != nil {
			return "", nil, fmt.Errorf("the answer to %s is not a vector", expr)
		}
		out := make([]sample, 0, len(vec))
		for _, e := range vec {
			s, err := decodePair(e.Value)
			if err != nil {
				return "", nil, fmt.Errorf("the answer to %s: %w", expr, err)
			}
			s.labels = e.Metric
			if s.labels == nil {
				s.labels = map[string]string{}
			}
			out = append(out, s)
		}
		return d.ResultType, out, nil
	}
	return "", nil, fmt.Errorf("the answer to %s is a %q, not a vector or scalar", expr, d.ResultType)
}

// decodePair reads the API's [time, "value"].
func decodePair(p [2]any) (sample, error) {
	at, ok := p[0].(float64)
	text, ok2 := p[1].(string)
	if !ok || !ok2 {
		return sample{}, fmt.Errorf("a sample is not [time, \"value\"]")
	}
	// ParseFloat reads Prometheus's NaN, +Inf and -Inf too.
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return sample{}, fmt.Errorf("a sample's value %q is not a number", text)
	}
	return sample{value: v, at: at}, nil
}
