package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCounter checks the counting server on its own: effects per key,
// injected failures, held requests and held answers.
func TestCounter(t *testing.T) {
	t.Parallel()
	c := NewCounter(t)
	post := func(body string) int {
		resp, err := http.Post(c.URL+"/effect", "application/json", strings.NewReader(body))
		if err != nil {
			t.Errorf("POST /effect: %v", err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	c.FailNext("a", 1)
	if got := post(`{"key":"a"}`); got != http.StatusInternalServerError {
		t.Errorf("first call for a: status %d, want 500", got)
	}
	if got := post(`{"key":"a"}`); got != http.StatusOK {
		t.Errorf("second call for a: status %d, want 200", got)
	}
	if got := post(`{}`); got != http.StatusBadRequest {
		t.Errorf("call without key: status %d, want 400", got)
	}
	if c.Count("a") != 1 || c.Attempts("a") != 2 || c.Total() != 1 {
		t.Errorf("after fail+success: count %d attempts %d total %d, want 1 2 1", c.Count("a"), c.Attempts("a"), c.Total())
	}

	c.Hold()
	done := make(chan int)
	go func() { done <- post(`{"key":"b"}`) }()
	c.WaitAttempts(t, "b", 1, 30*time.Second)
	if c.Count("b") != 0 {
		t.Errorf("held request counted before Release")
	}
	c.Release()
	if got := <-done; got != http.StatusOK || c.Count("b") != 1 {
		t.Errorf("released request: status %d, count %d; want 200, 1", got, c.Count("b"))
	}

	c.HoldAnswers()
	go func() { done <- post(`{"key":"c"}`) }()
	c.WaitEffects(t, "c", 1, 30*time.Second)
	select {
	case got := <-done:
		t.Errorf("held answer sent before Release (status %d)", got)
	default:
	}
	c.Release()
	if got := <-done; got != http.StatusOK || c.Count("c") != 1 {
		t.Errorf("released answer: status %d, count %d; want 200, 1", got, c.Count("c"))
	}
}
