// Package short is the switch of the fast tier. `go test -short` runs the
// tests that need nothing outside the test process (parsers, signature
// checks, configuration, fuzz seeds, scripts run on fixtures) and skips,
// saying what is missing, those that need PostgreSQL, n8n, Redis, a
// browser, promtool or a build of claimd. Without -short every test runs
// as before.
package short

import "testing"

// Skip skips t under -short. needs names what the test needs, as in
// "PostgreSQL" or "n8n and PostgreSQL".
func Skip(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skip(Reason(needs))
	}
}

// Reason is the skip message for a test that needs needs.
func Reason(needs string) string {
	return "needs " + needs + ": run without -short"
}
