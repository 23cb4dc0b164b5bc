package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The daemon's metrics are package metrics' Collector over its Store (the
// ones the README lists, and that its rules file gates a rollout on), and
// Go's runtime and process metrics. The daemon defines none of its own.

// metricsHandler serves c (and Go's runtime and process metrics) on
// /metrics.
func metricsHandler(c prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// serveMetrics serves /metrics on addr until stop is called, and says
// where on log (addr may have port 0).
func serveMetrics(addr string, c prometheus.Collector, log io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	fmt.Fprintf(log, "ipam: serving metrics on http://%s/metrics\n", ln.Addr())
	srv := &http.Server{Handler: metricsHandler(c), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
