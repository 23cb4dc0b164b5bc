// Command vulns reads govulncheck's JSON output (-format json) on stdin,
// prints what it found in a few lines, and exits 1 if a vulnerability is
// reachable (called, by govulncheck's symbol-level analysis) in a module
// other than the standard library; a reachable one in the standard
// library is printed and not failed on, since the toolchain is the
// machine's. .ci/run runs it; it uses only the standard library.
//
//	go run golang.org/x/vuln/cmd/govulncheck@VERSION -db file://DIR -format json PATTERN | go run .ci/vulns.go
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

// message is one JSON object of govulncheck's output stream (its
// protocol v1: golang.org/x/vuln/internal/govulncheck).
type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

// found is a vulnerability reachable in one module.
type found struct {
	id, module, version, fixed string
}

func main() {
	summaries := map[string]string{}
	reachable := map[found]bool{}
	notCalled := map[string]bool{}
	dec := json.NewDecoder(os.Stdin)
	for {
		var m message
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "vulns: govulncheck's output is not its JSON stream:", err)
			os.Exit(2)
		}
		switch {
		case m.Config != nil:
			fmt.Printf("govulncheck %s, database %s\n", m.Config.ScannerVersion, m.Config.DB)
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil && len(m.Finding.Trace) > 0:
			top := m.Finding.Trace[0]
			if top.Function == "" {
				notCalled[m.Finding.OSV] = true // imported or required, not called
				continue
			}
			reachable[found{m.Finding.OSV, top.Module, top.Version, m.Finding.FixedVersion}] = true
		}
	}
	os.Exit(report(reachable, notCalled, summaries))
}

// report prints the findings and returns the exit status.
func report(reachable map[found]bool, notCalled map[string]bool, summaries map[string]string) int {
	var modules, stdlib []found
	for f := range reachable {
		delete(notCalled, f.id)
		if f.module == "stdlib" {
			stdlib = append(stdlib, f)
		} else {
			modules = append(modules, f)
		}
	}
	print := func(title string, fs []found) {
		sort.Slice(fs, func(i, j int) bool { return fs[i].id+fs[i].module < fs[j].id+fs[j].module })
		fmt.Printf("%s: %d\n", title, len(fs))
		for _, f := range fs {
			fmt.Printf("  %s %s@%s, fixed in %s: %s\n", f.id, f.module, f.version, f.fixed, summaries[f.id])
		}
	}
	print("reachable in a module (fails the run: raise the examples module's requirement)", modules)
	print("reachable in the standard library (printed, not failed on: the toolchain is the machine's)", stdlib)
	fmt.Printf("in packages or modules required but not called: %d\n", len(notCalled))
	if len(modules) > 0 {
		return 1
	}
	return 0
}
