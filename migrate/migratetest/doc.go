// Package migratetest proves an expand/contract rollout safe for your own
// adapters, and provides fakes for the legacy side, like net/http/httptest
// does for HTTP.
//
// # Caveats
//
// The fakes model the two kinds of legacy source: [Implicit] changes only
// from outside (like CRI), [Explicit] is written by the Store (like a
// proxy's registry). Neither models latency.
package migratetest
