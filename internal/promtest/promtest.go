// Package promtest runs a real Prometheus server for tests: Debian's
// prometheus binary (apt-get install prometheus), started by the test on
// 127.0.0.1 with its own data directory and configuration, scraping its
// targets and evaluating the rules files it is given every second, and a
// small client of its HTTP API to wait on what it says.
//
// Targets are file-based service discovery (file_sd_configs): SetTargets
// rewrites a job's file, and the server follows, as it follows a cluster's
// discovery, so that a test can take a node out of discovery and put it
// back.
//
// # Caveats
//
//   - It is for tests only. Start skips the test, saying how to install the
//     server, when the binary is not on PATH (fails it, with
//     PHASESHIFT_REQUIRE_PROMETHEUS=1).
//   - The server's port is found by listening on port 0 and closing it
//     before the server binds it; Start tries again if another process took
//     the port meanwhile.
//   - A change of targets reaches the server through its file watcher, and
//     then its next scrape: wait on what the server says (Eventually), never
//     for a while.
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TestingT is what Start needs of a *testing.T.
type TestingT interface {
	Helper()
	Skip(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Config is what the server runs.
type Config struct {
	// Rules are the rules files the server evaluates, by path.
	Rules []string
	// Jobs are the scrape jobs, each with its targets at the start.
	Jobs map[string][]Target
	// Interval is the scrape and evaluation interval: 1s when 0.
	Interval time.Duration
}

// Target is one target of a job: its address and the labels it is
// given (instance, to name the node).
type Target struct {
	Address string
	Labels  map[string]string
}

// Server is a running Prometheus server. Its methods are safe for
// concurrent use.
type Server struct {
	URL      string // http://127.0.0.1:PORT
	dir      string
	interval time.Duration
	cmd      *exec.Cmd
	exited   chan struct{}
	logs     *logBuffer
	mu       sync.Mutex // guards the targets files
}

// EnvRequire, set to 1, makes a missing prometheus binary fail the test
// instead of skipping it: .ci/run sets it, as it installs the server.
const EnvRequire = "PHASESHIFT_REQUIRE_PROMETHEUS"

// Binary returns the path of the prometheus binary. Where it is not on
// PATH it skips the test, saying how to install it, or fails it when
// EnvRequire is 1.
func Binary(t TestingT) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err == nil {
		return bin
	}
	msg := "the prometheus server is not on PATH, so this test of a real Prometheus does not run: install it (Debian: apt-get install prometheus, which .ci/run does)"
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s; %s=1 requires it", msg, EnvRequire)
	}
	t.Skip(msg)
	return ""
}

// Start starts a server with cfg and stops it at the test's cleanup; where
// the prometheus binary is not on PATH, Binary decides.
func Start(t TestingT, cfg Config) *Server {
	t.Helper()
	bin := Binary(t)
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	s := &Server{dir: t.TempDir(), interval: cfg.Interval}
	config, err := s.writeConfig(cfg)
	if err != nil {
		t.Fatalf("promtest: %v", err)
	}
	for attempt := 1; ; attempt++ {
		err := s.start(bin, config)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("promtest: %v", err)
		}
		t.Logf("promtest: %v; trying another port", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Logf("promtest: stopping the server: %v", err)
		}
	})
	return s
}

// writeConfig writes the server's configuration and each job's targets
// file, and returns the configuration's path.
func (s *Server) writeConfig(cfg Config) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n  scrape_timeout: %s\n", cfg.Interval, cfg.Interval, cfg.Interval)
	b.WriteString("rule_files:\n")
	for _, r := range cfg.Rules {
		abs, err := filepath.Abs(r)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  - %q\n", abs)
	}
	b.WriteString("scrape_configs:\n")
	for job, targets := range cfg.Jobs {
		fmt.Fprintf(&b, "  - job_name: %q\n    file_sd_configs:\n      - files: [%q]\n        refresh_interval: %s\n", job, s.targetsFile(job), cfg.Interval)
		if err := s.SetTargets(job, targets); err != nil {
			return "", err
		}
	}
	path := filepath.Join(s.dir, "prometheus.yml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func (s *Server) targetsFile(job string) string {
	return filepath.Join(s.dir, "targets-"+job+".json")
}

// SetTargets replaces job's targets (file-based discovery): the server
// scrapes the new ones, and stops scraping the others (their series go
// stale), once its watcher has read the file.
func (s *Server) SetTargets(job string, targets []Target) error {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	groups := []group{}
	for _, t := range targets {
		groups = append(groups, group{Targets: []string{t.Address}, Labels: t.Labels})
	}
	b, err := json.Marshal(groups)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Written aside and renamed, so that the watcher never reads half.
	tmp := s.targetsFile(job) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.targetsFile(job))
}

// start runs the server on a free port and waits until it is ready.
func (s *Server) start(bin, config string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	data := filepath.Join(s.dir, "data-"+strconv.Itoa(port))
	s.logs = &logBuffer{}
	s.cmd = exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+data, "--web.listen-address="+addr, "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	s.URL = "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited at start:\n%s", s.logs)
		case <-time.After(50 * time.Millisecond): // the server's own readiness, polled
		}
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	_ = s.stop()
	return fmt.Errorf("the server was not ready within a minute:\n%s", s.logs)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// stop ends the server with SIGTERM, then SIGKILL.
func (s *Server) stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return errors.New("it did not stop on SIGTERM within 10s; killed")
	}
}

// WaitScraped waits until the server has scraped n targets of job, up or
// not, and none more, and fails the test if it does not within a minute.
func (s *Server) WaitScraped(t TestingT, job string, n int) {
	t.Helper()
	expr := fmt.Sprintf(`up{job=%q}`, job)
	got, ok, err := Eventually(s, time.Minute, func(ctx context.Context) ([]Sample, error) { return s.Query(ctx, expr) },
		func(up []Sample) bool { return len(up) == n })
	if !ok {
		t.Fatalf("promtest: the server did not scrape %d targets of job %s within a minute: %v %v\n%s", n, job, got, err, s.Logs())
	}
}

// Logs returns what the server wrote (at level warn and above).
func (s *Server) Logs() string { return s.logs.String() }

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
	At     time.Time
}

// Query evaluates expr now and returns its instant vector (a scalar as
// one sample without labels).
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	u := s.URL + "/api/v1/query?" + url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var a struct {
		Status, Error string
		Data          struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		}
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Status != "success" {
		return nil, fmt.Errorf("query %s: HTTP %d: %s %s", expr, resp.StatusCode, a.Error, body)
	}
	return decode(a.Data.ResultType, a.Data.Result)
}

func decode(kind string, raw json.RawMessage) ([]Sample, error) {
	pair := func(p [2]any) (Sample, error) {
		at, _ := p[0].(float64)
		text, _ := p[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		return Sample{Value: v, At: time.UnixMilli(int64(at * 1000))}, err
	}
	if kind == "scalar" {
		var p [2]any
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
		s, err := pair(p)
		return []Sample{s}, err
	}
	var vec []struct {
		Metric map[string]string
		Value  [2]any
	}
	if err := json.Unmarshal(raw, &vec); err != nil {
		return nil, fmt.Errorf("a %s result: %w", kind, err)
	}
	out := make([]Sample, 0, len(vec))
	for _, e := range vec {
		s, err := pair(e.Value)
		if err != nil {
			return nil, err
		}
		s.Labels = e.Metric
		out = append(out, s)
	}
	return out, nil
}

// Alert is one alert the server holds: pending or firing.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// Alerts returns every alert the server holds, pending and firing.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a struct {
		Status string
		Data   struct{ Alerts []Alert }
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.Status != "success" {
		return nil, fmt.Errorf("alerts: HTTP %d: %v", resp.StatusCode, err)
	}
	return a.Data.Alerts, nil
}

// Eventually asks until cond holds for what ask returns, or timeout
// passes: it returns the last answer and whether cond held. It asks every
// tenth of the server's interval, each time waiting on the server.
func Eventually[T any](s *Server, timeout time.Duration, ask func(context.Context) (T, error), cond func(T) bool) (T, bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := ask(ctx)
		cancel()
		if err == nil && cond(v) {
			return v, true, nil
		}
		if time.Now().After(deadline) {
			return v, false, err
		}
		select {
		case <-s.exited:
			return v, false, fmt.Errorf("the server exited:\n%s", s.logs)
		case <-time.After(s.interval / 10):
		}
	}
}

// logBuffer collects the server's output.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
