// Package deps holds no code: its tests hold the root module to what the
// README's "Modules and dependencies" promises, that a program importing
// checkpoint and migrate requires zap and golang.org/x/sys and nothing
// else, so that its own pins of gRPC, cri-api, Prometheus and the CNI
// modules stay where it put them.
//
// # Caveats
//
//   - The pin test needs the Go module proxy (GOPROXY) for the pinned
//     modules: it skips, saying so, when the proxy cannot be reached,
//     unless PHASESHIFT_REQUIRE_PROXY=1, which .ci/run sets so that CI
//     never skips it.
//   - It checks the versions go mod tidy selects, not what the program
//     links (source/cri's own test, TestOnlyCRIPullsGRPC, does that).
package deps
