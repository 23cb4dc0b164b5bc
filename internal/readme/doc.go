// Package readme holds no code: its tests run what the README shows a new
// user, as written, and check that it does what the README says it does.
// The operator's walkthrough on a laptop (examples/ipam --cri inprocess
// and the phaseshift command) runs in bash against binaries built from
// this repository; the Quick start runs as a program in a temporary
// module that uses the repository's modules through a go.work, with the
// commands the README shows under it, and must print what the README
// shows.
//
// # Caveats
//
//   - The walkthrough needs bash and Linux (the control socket checks its
//     peers with SO_PEERCRED); the tests skip, saying so, elsewhere.
//   - The README's other Go blocks are fragments (CRI, host-local, metrics,
//     the control socket, migratetest): they are not compiled here yet.
//   - The tests build and run programs with the go command: they need it on
//     PATH and take a few seconds each (-short skips them).
package readme
