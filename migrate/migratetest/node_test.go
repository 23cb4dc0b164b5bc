package migratetest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

func addresses(v string) []string { return strings.Split(v, ",") }

// A node where pod-a holds 10.0.0.1 and pod-b 10.0.0.2, judged after a
// restore that lost pod-b and served a record nobody wrote.
func ExampleNode() {
	node := migratetest.NewNode[string, string](nil, addresses)
	node.Acknowledge("pod-a", "10.0.0.1")
	node.Acknowledge("pod-b", "10.0.0.2")

	served := map[string]string{"pod-a": "10.0.0.1", "pod-c": "10.0.0.3"}
	vs, leaks := node.Check(served, migrate.Report[string]{}, false)
	for _, v := range vs {
		fmt.Println(v)
	}
	fmt.Println("reported leaks:", leaks)
	// Output:
	// missing: pod-b: its holder exists and its write was acknowledged, but it is not served
	// invented: pod-c: served with a value no acknowledged write or legacy record produced
	// free while held: pod-b: a part of the value its holder uses is served to no entry, so it can be handed out again
	// reported leaks: 0
}

func TestNodeCheck(t *testing.T) {
	unique := addresses
	t.Run("a refusal is judged by the sides, not here", func(t *testing.T) {
		n := migratetest.NewNode[string, string](nil, unique)
		n.Acknowledge("a", "1")
		if vs, _ := n.Check(nil, migrate.Report[string]{}, true); len(vs) != 0 {
			t.Fatalf("violations after a refusal: %v", vs)
		}
	})
	t.Run("served twice to two live holders", func(t *testing.T) {
		n := migratetest.NewNode[string, string](nil, unique)
		n.Acknowledge("a", "1")
		n.Acknowledge("b", "1,2")
		vs, _ := n.Check(map[string]string{"a": "1", "b": "1,2"}, migrate.Report[string]{}, false)
		if len(vs) != 1 || vs[0].Invariant != migratetest.Twice {
			t.Fatalf("got %v, want one %q", vs, migratetest.Twice)
		}
	})
	t.Run("a gone holder's entry is a leak, allowed only when reported", func(t *testing.T) {
		n := migratetest.NewNode[string, string](nil, unique)
		n.Acknowledge("a", "1")
		n.AcknowledgeDelete("a")
		served := map[string]string{"a": "1"}
		vs, _ := n.Check(served, migrate.Report[string]{}, false)
		if len(vs) != 1 || vs[0].Invariant != migratetest.SilentLeak {
			t.Fatalf("got %v, want one %q", vs, migratetest.SilentLeak)
		}
		for _, rep := range []migrate.Report[string]{{Orphaned: []string{"a"}}, {Errors: []error{errors.New(`entry "a": kept`)}}} {
			if vs, leaks := n.Check(served, rep, false); len(vs) != 0 || leaks != 1 {
				t.Fatalf("reported leak: got %v and %d leaks, want none and 1", vs, leaks)
			}
		}
	})
	t.Run("an unsettled write may be served before or after", func(t *testing.T) {
		n := migratetest.NewNode[string, string](nil, unique)
		n.Acknowledge("a", "1")
		n.Unsettled("a", "2", false)
		for _, served := range []map[string]string{{"a": "1"}, {"a": "2"}, {}} {
			if vs, _ := n.Check(served, migrate.Report[string]{}, false); len(vs) != 0 {
				t.Fatalf("served %v: %v", served, vs)
			}
		}
		if vs, _ := n.Check(map[string]string{"a": "1,2"}, migrate.Report[string]{}, false); len(vs) != 1 || vs[0].Invariant != migratetest.Invented {
			t.Fatalf("a mixed record: got %v, want %q", vs, migratetest.Invented)
		}
	})
	t.Run("a reboot ends every holder", func(t *testing.T) {
		n := migratetest.NewNode[string, string](nil, unique)
		n.Acknowledge("a", "1")
		n.Gone()
		if vs, _ := n.Check(map[string]string{}, migrate.Report[string]{}, false); len(vs) != 0 {
			t.Fatalf("after a reboot: %v", vs)
		}
	})
}
