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
// has been scraped since it started and the rules evaluated twice since;
// then, while a node is held down (scraped once since its restore), it
// waits for the hold-down to end, and answers.

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
a node that restarted just before is judged on what it says now; then,
while a node is held down (scraped only once since its restore), it waits
for its next scrape. It prints the nodes that block the phase and why, and
exits 0 when the fleet may move, 9 when it may not (or the wait outlasted
--timeout). Nodes that run phase 3 on an unsafe restore are listed too
(they block nothing: moving back is their heal).`,
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
	Safe      bool      `json:"safe"`
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

// waitFresh waits until every target of the job has been scraped since
// the server's time when gate started, and the gate's rule evaluated twice
// since the last of those scrapes (once could have read a scrape not yet
// stored).
func (g *gateRun) waitFresh(ctx context.Context) error {
	start, err := g.api.now(ctx)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	safe := fmt.Sprintf(`timestamp(phaseshift:safe_to_move_to_phase{phase="%d"})`, g.phase)
	first := math.Inf(1) // the first evaluation after every scrape
	for {
		scraped, err := g.api.query(ctx, fmt.Sprintf(`timestamp(up{job=%q})`, g.o.job))
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		last, stale := start, 0
		for _, s := range scraped {
			last = max(last, s.value)
			if s.value < start {
				stale++
			}
		}
		evaluated, err := g.api.query(ctx, safe)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		if stale == 0 && len(evaluated) > 0 {
			switch at := evaluated[0].value; {
			case at > first:
				return nil
			case at >= last && math.IsInf(first, 1):
				first = at
			}
		}
		if time.Now().After(g.deadline) {
			return g.notFresh(stale, len(evaluated) > 0)
		}
		if err := g.pause(ctx); err != nil {
			return err
		}
	}
}

// notFresh is the refusal when the data did not become fresh in time.
func (g *gateRun) notFresh(stale int, evaluated bool) error {
	if !evaluated {
		return fail(exitFailed, "the Prometheus server at %s has no series phaseshift:safe_to_move_to_phase{phase=\"%d\"}: load metrics/phaseshift.rules.yml in its rule_files", g.api.base, g.phase)
	}
	return fail(exitRefused, "refused: after %v, %d targets of job %s were not scraped since the gate started (or the rules not evaluated since): the gate cannot judge the fleet on what it said before", g.o.timeout, stale, g.o.job)
}

// read reads the gate once: whether phase N is safe, what blocks it, and
// whether a node is held down.
func (g *gateRun) read(ctx context.Context) (gateAnswer, bool, error) {
	a := gateAnswer{Phase: g.phase, Blocking: []blocker{}, Warnings: []blocker{}}
	expr := fmt.Sprintf(`phaseshift:safe_to_move_to_phase{phase="%[1]d"} or phaseshift:node_blocks_phase{phase="%[1]d"}`+
		` or phaseshift:node_unreported or phaseshift:node_held_down or phaseshift:node_unsafe_in_phase3`, g.phase)
	samples, err := g.api.query(ctx, expr)
	if err != nil {
		return a, false, fail(exitFailed, "%v", err)
	}
	held, seenSafe := false, false
	for _, s := range samples {
		name := s.labels["__name__"]
		switch name {
		case "phaseshift:safe_to_move_to_phase":
			a.Safe, seenSafe = s.value == 1, true
			continue
		case "phaseshift:node_held_down":
			held = true
			s.labels["reason"] = "held_down"
		}
		b := blocker{Series: name, Instance: s.labels["instance"], Store: s.labels["store"], Reason: s.labels["reason"], Kind: s.labels["kind"], Value: s.value}
		if name == "phaseshift:node_unsafe_in_phase3" {
			a.Warnings = append(a.Warnings, b)
		} else {
			a.Blocking = append(a.Blocking, b)
		}
	}
	if !seenSafe {
		return a, false, fail(exitFailed, "the Prometheus server at %s has no series phaseshift:safe_to_move_to_phase{phase=\"%d\"}: load metrics/phaseshift.rules.yml in its rule_files", g.api.base, g.phase)
	}
	sortBlockers(a.Blocking)
	sortBlockers(a.Warnings)
	a.Reporting, a.Expected, err = g.counts(ctx)
	return a, held, err
}

// counts returns how many nodes report, and how many are expected.
func (g *gateRun) counts(ctx context.Context) (int, *float64, error) {
	rep, err := g.api.query(ctx, fmt.Sprintf(`count(count by (instance) (phaseshift_phase{job=%q}))`, g.o.job))
	if err != nil {
		return 0, nil, fail(exitFailed, "%v", err)
	}
	exp, err := g.api.query(ctx, fmt.Sprintf(`max(phaseshift:expected_nodes{job=%q})`, g.o.job))
	if err != nil {
		return 0, nil, fail(exitFailed, "%v", err)
	}
	n := 0
	if len(rep) > 0 {
		n = int(rep[0].value)
	}
	if len(exp) == 0 {
		return n, nil, nil
	}
	return n, &exp[0].value, nil
}

func sortBlockers(bs []blocker) {
	slices.SortFunc(bs, func(a, b blocker) int {
		return strings.Compare(a.Instance+"\x00"+a.Store+"\x00"+a.Reason+"\x00"+a.Kind, b.Instance+"\x00"+b.Store+"\x00"+b.Reason+"\x00"+b.Kind)
	})
}

// printGate prints the answer and returns the refusal, if it is one.
func printGate(e *env, a gateAnswer) error {
	refused := fail(exitRefused, "refused: the fleet may not move to phase %d (%d blocking: %s)", a.Phase, len(a.Blocking), summarize(a.Blocking))
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
	if a.Safe && len(a.Blocking) == 0 {
		fmt.Fprintf(w, "the fleet may move to phase %d: no node blocks it (%d nodes report, %s)\n", a.Phase, a.Reporting, expected)
	} else {
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
