// Package conventions holds tests of conventions that span the
// repository's packages and modules, read from their source: what a
// reviewer would otherwise have to keep in mind across files.
//
// # Caveats
//
//   - It has no code, only tests; they read the repository's files from
//     disk, so they run from a checkout, not from the module cache.
package conventions
