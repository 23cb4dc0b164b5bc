//go:build race

package main

// raceEnabled builds the plugin under test with the race detector too, so
// that the exec'd tests also look for races in the real binary.
const raceEnabled = true
