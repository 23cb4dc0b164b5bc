// Package testsize says how much the repository's long-running tests do:
// the default go test of each package ends within about a minute on an
// idle two-core machine,
// -short cuts it further, and PHASESHIFT_LONG_TESTS=1 runs the long
// variants (more kills, more seeds, longer phase sequences), which .ci/run
// runs in a step of its own.
//
// # Caveats
//
//   - It is for tests only; it reads the environment at every call.
package testsize

import (
	"os"
	"testing"
)

// Env is the environment variable that asks for the long variants.
const Env = "PHASESHIFT_LONG_TESTS"

// Long reports whether the long variants were asked for.
func Long() bool { return os.Getenv(Env) == "1" }

// Pick returns short under -short, long when Long, and normal otherwise.
func Pick(short, normal, long int) int {
	switch {
	case testing.Short():
		return short
	case Long():
		return long
	}
	return normal
}
