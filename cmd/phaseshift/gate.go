package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/migrate"
)

// gate asks a Prometheus server that evaluates metrics/phaseshift.rules.yml
// whether the fleet may move to phase N: the step a pipeline runs between
// two updates of the DaemonSet. The rules cannot see a restart before
// Prometheus scrapes it, so gate first waits until every target of the job
// has been scraped since it started, and then for two evaluations of the
// rules after the latest of those scrapes (waitFresh says why that time is
// fixed once); then, while a node is held down (scraped once since its
// restore), it waits for the hold-down to end, and answers. It says "go"
// only on the word of the job's nodes: a job with no target, or none
// reporting, is refused, and an answer of the server's that is empty where
// the gate needs a value, malformed or failed is an error (exit 8), never
// a guess.

// gateOptions are gate's flags.
type gateOptions struct {
	prometheus string
	job        string
	timeout    time.Duration
	poll       time.Duration
}

func (o *gateOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.prometheus, "prometheus", "", "the URL of the Prometheus server that evaluates metrics/phaseshift.rules.yml (its HTTP API), e.g. http://prometheus.monitoring:9090")
	fs.StringVar(&o.job, "job", "ipamd", "the scrape job of the daemons, as the rules select it (job=\"ipamd\" unless you changed it)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for fresh scrapes and the hold-down before refusing (exit 9)")
	fs.DurationVar(&o.poll, "poll", time.Second, "how often to ask the server while waiting")
}

func newGateCommand() *command {
	o := &gateOptions{}
	return &command{
		name:    "gate",
		summary: "ask Prometheus whether the fleet may move to phase N (exit 0), or which nodes block it (exit 9)",
		args:    "N",
		about: `gate asks the Prometheus server at --prometheus, which scrapes the daemons
(job --job) and evaluates metrics/phaseshift.rules.yml, whether the fleet
may move to phase N (1, 2 or 3, or expand, migrate, contract): the step a
pipeline or an operator runs between two updates of the DaemonSet, after
kubectl rollout status. It first waits until every target of the job has
been scraped since it started and the rules evaluated twice since, so that
a node that restarted just before is judged on what it says now (about
three scrape intervals); then, while a node is held down (scraped only
once since its restore), it waits for its next scrape. It prints the
nodes that block the phase and why, and exits 0 when the fleet may move,
9 when it may not (or no node of the job reports, or the wait outlasted
--timeout), 8 when the server fails or answers what is not Prometheus's
answer. Nodes that run phase 3 on an unsafe restore are listed too (they
block nothing: moving back is their heal).`,
		examples: []string{
			"phaseshift gate --prometheus http://prometheus.monitoring:9090 3",
			"phaseshift gate --prometheus http://127.0.0.1:9090 --job ipamd --timeout 2m migrate && kubectl set env daemonset/ipamd PHASESHIFT_PHASE=migrate",
			"phaseshift gate --json --prometheus http://127.0.0.1:9090 2 | jq '.blocking[]'",
		},
		refused:  "the fleet may not move to the phase (the blocking nodes are listed), or the data did not become fresh within --timeout",
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runGate(ctx, e, o, args) },
	}
}

// blocker is one series of the gate's that says why the fleet may not move
// (or, Warning, that a node runs phase 3 unsafely).
type blocker struct {
	Series   string  `json:"series"` // the rule's record name
	Instance string  `json:"instance,omitempty"`
	Store    string  `json:"store,omitempty"`
	Reason   string  `json:"reason"`
	Kind     string  `json:"kind,omitempty"`
	Value    float64 `json:"value"`
}

// gateAnswer is gate's answer, its --json output.
type gateAnswer struct {
	Phase     int       `json:"phase"`
	Job       string    `json:"job"`
	Safe      bool      `json:"safe"` // never without a node of the job reporting
	Blocking  []blocker `json:"blocking"`
	Warnings  []blocker `json:"warnings"`
	Reporting int       `json:"reporting"`          // nodes that export phaseshift_phase
	Expected  *float64  `json:"expected,omitempty"` // phaseshift:expected_nodes, if stated
	TimedOut  bool      `json:"timedOut,omitempty"` // the hold-down outlasted --timeout
}

func runGate(ctx context.Context, e *env, o *gateOptions, args []string) error {
	if err := wantArgs(args, "N"); err != nil {
		return err
	}
	phase, err := migrate.ParsePhase(args[0])
	if err != nil || phase == migrate.PhaseLegacy {
		return usageError("N %q: give the phase to move to, 1 (expand), 2 (migrate) or 3 (contract); moving back to phase 0 needs no gate", args[0])
	}
	if o.prometheus == "" {
		return usageError("--prometheus is missing: give the URL of the Prometheus server that evaluates metrics/phaseshift.rules.yml")
	}
	if o.timeout < 0 || o.poll <= 0 {
		return usageError("--timeout must not be negative and --poll must be positive (got %v and %v)", o.timeout, o.poll)
	}
	api, err := newPromAPI(o.prometheus)
	if err != nil {
		return err
	}
	g := &gateRun{api: api, o: o, phase: int(phase), deadline: time.Now().Add(o.timeout)}
	a, err := g.answer(ctx)
	if err != nil {
		return err
	}
	return printGate(e, a)
}

// gateRun is one run of gate.
type gateRun struct {
	api      *promAPI
	o        *gateOptions
	phase    int
	deadline time.Time
}

// answer waits for fresh data, then out the hold-down, and reads the gate.
func (g *gateRun) answer(ctx context.Context) (gateAnswer, error) {
	if err := g.waitFresh(ctx); err != nil {
		return gateAnswer{}, err
	}
	for {
		a, held, err := g.read(ctx)
		if err != nil || !held {
			return a, err
		}
		if time.Now().After(g.deadline) {
			a.Safe, a.TimedOut = false, true
			return a, nil
		}
		if err := g.pause(ctx); err != nil {
			return a, err
		}
	}
}

// pause waits --poll, or until ctx is done.
func (g *gateRun) pause(ctx context.Context) error {
	t := time.NewTimer(g.o.poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fail(exitFailed, "interrupted while waiting for the Prometheus server: %v", ctx.Err())
	case <-t.C:
		return nil
	}
}

// waitFresh waits until the rules have judged every target of the job on
// a scrape since the gate started. It fixes its target once: the latest
// scrape time at the first poll where every target has been scraped since
// the server's time at the start, and waits for two evaluations at or
// after it (the first could have run before that scrape was stored). A
// target recomputed at each poll, the latest scrape of any target, may
// never be passed: Prometheus spreads its targets' scrapes across the
// interval, so with many targets one is nearly always scraped after the
// last evaluation.
func (g *gateRun) waitFresh(ctx context.Context) error {
	start, err := g.api.now(ctx)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	scraped, err := g.waitScraped(ctx, start)
	if err != nil {
		return err
	}
	return g.waitEvaluated(ctx, scraped)
}

// waitScraped waits until every target of the job has been scraped at or
// after start, and returns the latest of those scrapes. A job with no
// target is refused at once: no node's word can be read.
func (g *gateRun) waitScraped(ctx context.Context, start float64) (float64, error) {
	expr := fmt.Sprintf(`timestamp(up{job=%q})`, g.o.job)
	for {
		scraped, err := g.api.vector(ctx, expr)
		if err != nil {
			return 0, fail(exitFailed, "%v", err)
		}
		if len(scraped) == 0 {
			return 0, fail(exitRefused, "refused: the Prometheus server at %s scrapes no target of job %q, so no node's word can be read: give --job the scrape job of the daemons, the one the rules select (job=\"ipamd\" unless you changed it)", g.api.base, g.o.job)
		}
		last, stale := start, 0
		for _, s := range scraped {
			last = max(last, s.value)
			if s.value < start {
				stale++
			}
		}
		if stale == 0 {
			return last, nil
		}
		if time.Now().After(g.deadline) {
			return 0, fail(exitRefused, "refused: after %v, %d of the %d targets of job %s were not scraped since the gate started: the gate cannot judge the fleet on what it said before (is --timeout shorter than the scrape interval?)", g.o.timeout, stale, len(scraped), g.o.job)
		}
		if err := g.pause(ctx); err != nil {
			return 0, err
		}
	}
}

// waitEvaluated waits for two evaluations of the gate's rule at or after
// scraped.
func (g *gateRun) waitEvaluated(ctx context.Context, scraped float64) error {
	expr := fmt.Sprintf(`timestamp(phaseshift:safe_to_move_to_phase{phase="%d"})`, g.phase)
	first := math.Inf(1) // the first evaluation at or after scraped
	for {
		evaluated, err := g.api.vector(ctx, expr)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		if len(evaluated) > 0 {
			at := evaluated[0].value
			for _, s := range evaluated {
				at = min(at, s.value)
			}
			switch {
			case at > first:
				return nil
			case at >= scraped && math.IsInf(first, 1):
				first = at
			}
		}
		if time.Now().After(g.deadline) {
			if len(evaluated) == 0 {
				return g.noRules()
			}
			return fail(exitRefused, "refused: after %v, the rules were not evaluated twice since every target of job %s was scraped: the gate cannot judge the fleet on what it said before (is --timeout shorter than two evaluation intervals?)", g.o.timeout, g.o.job)
		}
		if err := g.pause(ctx); err != nil {
			return err
		}
	}
}

// noRules is the error when the server has no series of the gate's rule.
func (g *gateRun) noRules() error {
	return fail(exitFailed, "the Prometheus server at %s has no series phaseshift:safe_to_move_to_phase{phase=\"%d\"}: load metrics/phaseshift.rules.yml in its rule_files", g.api.base, g.phase)
}

// gateSeries are the series the gate reads, but the safe one.
var gateSeries = []string{"phaseshift:node_blocks_phase", "phaseshift:node_unreported", "phaseshift:node_held_down", "phaseshift:node_unsafe_in_phase3"}

// read reads the gate once: whether phase N is safe, what blocks it, and
// whether a node is held down. The fleet is safe only when every series
// of the safe rule says 1 and some node of the job reports: the rules
// block a job with no target too, but the gate does not take their word
// for it.
func (g *gateRun) read(ctx context.Context) (gateAnswer, bool, error) {
	a := gateAnswer{Phase: g.phase, Job: g.o.job, Blocking: []blocker{}, Warnings: []blocker{}}
	expr := fmt.Sprintf(`phaseshift:safe_to_move_to_phase{phase="%[1]d"} or phaseshift:node_blocks_phase{phase="%[1]d"}`+
		` or phaseshift:node_unreported or phaseshift:node_held_down or phaseshift:node_unsafe_in_phase3`, g.phase)
	samples, err := g.api.vector(ctx, expr)
	if err != nil {
		return a, false, fail(exitFailed, "%v", err)
	}
	held, seenSafe := false, false
	a.Safe = true
	for _, s := range samples {
		name := s.labels["__name__"]
		switch {
		case name == "phaseshift:safe_to_move_to_phase":
			if s.value != 0 && s.value != 1 {
				return a, false, fail(exitFailed, "the Prometheus server at %s: phaseshift:safe_to_move_to_phase is %g, not 0 or 1: is it evaluating metrics/phaseshift.rules.yml as it ships?", g.api.base, s.value)
			}
			a.Safe, seenSafe = a.Safe && s.value == 1, true
		case name == "phaseshift:node_unsafe_in_phase3":
			a.Warnings = append(a.Warnings, newBlocker(s))
		case slices.Contains(gateSeries, name):
			held = held || name == "phaseshift:node_held_down"
			a.Blocking = append(a.Blocking, newBlocker(s))
		default:
			return a, false, fail(exitFailed, "the Prometheus server at %s answered the gate's query with a series %q the query does not select: is it a Prometheus server?", g.api.base, name)
		}
	}
	if !seenSafe {
		return a, false, g.noRules()
	}
	sortBlockers(a.Blocking)
	sortBlockers(a.Warnings)
	a.Reporting, a.Expected, err = g.counts(ctx)
	a.Safe = a.Safe && a.Reporting > 0
	return a, held, err
}

// newBlocker is the blocker one series of the gate's says.
func newBlocker(s sample) blocker {
	b := blocker{Series: s.labels["__name__"], Instance: s.labels["instance"], Store: s.labels["store"], Reason: s.labels["reason"], Kind: s.labels["kind"], Value: s.value}
	if b.Series == "phaseshift:node_held_down" {
		b.Reason = "held_down"
	}
	return b
}

// counts returns how many nodes of the job report, and how many are
// expected (nil: no count stated, which the rules block on).
func (g *gateRun) counts(ctx context.Context) (int, *float64, error) {
	expr := fmt.Sprintf(`count(count by (instance) (phaseshift_phase{job=%q})) or vector(0)`, g.o.job)
	rep, err := g.api.vector(ctx, expr)
	if err != nil {
		return 0, nil, fail(exitFailed, "%v", err)
	}
	if len(rep) != 1 {
		return 0, nil, fail(exitFailed, "the Prometheus server at %s answered %s with %d samples, not one: is it a Prometheus server?", g.api.base, expr, len(rep))
	}
	n, err := g.count(rep[0].value, expr)
	if err != nil {
		return 0, nil, err
	}
	expr = fmt.Sprintf(`max(phaseshift:expected_nodes{job=%q})`, g.o.job)
	exp, err := g.api.vector(ctx, expr)
	if err != nil {
		return 0, nil, fail(exitFailed, "%v", err)
	}
	switch len(exp) {
	case 0:
		return n, nil, nil
	case 1:
		_, err := g.count(exp[0].value, expr)
		return n, &exp[0].value, err
	}
	return 0, nil, fail(exitFailed, "the Prometheus server at %s answered %s with %d samples, not one or none: is it a Prometheus server?", g.api.base, expr, len(exp))
}

// count checks that v, the answer to expr, is a count of nodes.
func (g *gateRun) count(v float64, expr string) (int, error) {
	if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return 0, fail(exitFailed, "the Prometheus server at %s: %s is %g, not a count of nodes", g.api.base, expr, v)
	}
	return int(v), nil
}

func sortBlockers(bs []blocker) {
	slices.SortFunc(bs, func(a, b blocker) int {
		return strings.Compare(a.Instance+"\x00"+a.Store+"\x00"+a.Reason+"\x00"+a.Kind, b.Instance+"\x00"+b.Store+"\x00"+b.Reason+"\x00"+b.Kind)
	})
}

// printGate prints the answer and returns the refusal, if it is one.
func printGate(e *env, a gateAnswer) error {
	refused := fail(exitRefused, "refused: the fleet may not move to phase %d (%d blocking: %s)", a.Phase, len(a.Blocking), summarize(a.Blocking))
	if a.Reporting == 0 {
		refused = fail(exitRefused, "refused: no node of job %s reports phaseshift metrics: the gate says the fleet may move only on its nodes' word", a.Job)
	}
	if a.TimedOut {
		refused = fail(exitRefused, "refused: nodes were still held down (scraped once since their restore) after --timeout: the fleet may not move to phase %d yet", a.Phase)
	}
	if e.json {
		if err := json.NewEncoder(e.out).Encode(a); err != nil {
			return err
		}
	} else {
		w := bufio.NewWriter(e.out)
		printGateText(w, a)
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if a.Safe && len(a.Blocking) == 0 {
		return nil
	}
	return refused
}

func printGateText(w *bufio.Writer, a gateAnswer) {
	expected := "no expected count stated"
	if a.Expected != nil {
		expected = fmt.Sprintf("%g expected", *a.Expected)
	}
	switch {
	case a.Safe && len(a.Blocking) == 0:
		fmt.Fprintf(w, "the fleet may move to phase %d: no node blocks it (%d nodes report, %s)\n", a.Phase, a.Reporting, expected)
	case a.Reporting == 0:
		fmt.Fprintf(w, "the fleet may not move to phase %d: no node of job %s reports (%s)\n", a.Phase, a.Job, expected)
	default:
		fmt.Fprintf(w, "the fleet may not move to phase %d: %d blocking (%d nodes report, %s)\n", a.Phase, len(a.Blocking), a.Reporting, expected)
	}
	for _, b := range a.Blocking {
		fmt.Fprintf(w, "  %s\n", describeBlocker(b))
	}
	for _, b := range a.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", describeBlocker(b))
	}
}

// describeBlocker says what one series says, in one line.
func describeBlocker(b blocker) string {
	who := b.Instance
	if who == "" {
		who = "(the job)"
	}
	if b.Store != "" {
		who += " store " + b.Store
	}
	what := b.Reason
	if b.Kind != "" {
		what += " " + b.Kind
	}
	switch b.Series {
	case "phaseshift:node_held_down":
		return fmt.Sprintf("%s  held down: scraped %g time since its restore; the gate waits for its second scrape", who, b.Value)
	case "phaseshift:node_unreported":
		return fmt.Sprintf("%s  unreported: %s (%g)", who, what, b.Value)
	case "phaseshift:node_unsafe_in_phase3":
		return fmt.Sprintf("%s  unsafe in phase 3: %s (%g): heal it in phase 2", who, what, b.Value)
	}
	return fmt.Sprintf("%s  %s: %g", who, what, b.Value)
}

// summarize names the blockers in a few words, for the error line.
func summarize(bs []blocker) string {
	var parts []string
	for i, b := range bs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(bs)-3))
			break
		}
		who := b.Instance
		if who == "" {
			who = "job"
		}
		parts = append(parts, who+" "+b.Reason)
	}
	return strings.Join(parts, ", ")
}
