package short

import "testing"

func TestReason(t *testing.T) {
	if got, want := Reason("PostgreSQL"), "needs PostgreSQL: run without -short"; got != want {
		t.Fatalf("Reason = %q, want %q", got, want)
	}
}
