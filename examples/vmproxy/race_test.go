//go:build race

package main

// raceEnabled builds the binary under test with the race detector too, so
// that the functional tests also look for races in the real daemon.
const raceEnabled = true
