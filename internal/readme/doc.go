// Package readme holds no code: its tests run what the README shows a new
// user, as written, and check that it does what the README says it does.
// The operator's walkthrough on a laptop (examples/ipam --cri inprocess
// and the phaseshift command) runs in bash against binaries built from
// this repository; every Go code block compiles and runs in a temporary
// module that uses the repository's modules through a go.work, the Quick
// start as a program whose output the README shows, the fragments inside
// a frame that declares what they use.
//
// # Caveats
//
//   - The walkthrough needs bash and Linux (the control socket checks its
//     peers with SO_PEERCRED); the tests skip, saying so, elsewhere.
//   - A fragment compiles only inside its frame, which this package's
//     tests keep (fragments_test.go): a new Go block in the README fails
//     the test until a frame is written for it.
//   - The tests build and run programs with the go command: they need it on
//     PATH and take a few seconds each (-short skips them).
package readme
