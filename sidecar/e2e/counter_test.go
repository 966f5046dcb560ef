package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"
)

// Counter is the protected side effect: an HTTP server that counts the
// effects it performs per key. Workflows call POST {URL}/effect with the key
// in the JSON body ({"key": "..."}) or the query (?key=...). An effect answers
// 200 with {"key", "count", "effect_id"} where count is the number of effects
// for that key so far and effect_id ("eff-<n>", n counting all effects) can
// serve as a result reference.
type Counter struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:PORT.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	effects  map[string]int
	attempts map[string]int
	failLeft map[string]int
	total    int
	hold     chan struct{}
	// holdAnswer, when set, holds the answers of effects already performed.
	holdAnswer chan struct{}
}

// NewCounter starts a Counter on 127.0.0.1, closed in t.Cleanup.
func NewCounter(t testing.TB) *Counter {
	t.Helper()
	return NewCounterAt(t, "127.0.0.1")
}

// NewCounterAt starts a Counter listening on host (an IP address of this
// machine, on a free port), closed in t.Cleanup: containers reach it at
// their network's gateway address.
func NewCounterAt(t testing.TB, host string) *Counter {
	t.Helper()
	c := &Counter{effects: map[string]int{}, attempts: map[string]int{}, failLeft: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effect", c.serveEffect)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("counter: listening on %s: %v", host, err)
	}
	c.srv = httptest.NewUnstartedServer(mux)
	c.srv.Listener.Close()
	c.srv.Listener = ln
	c.srv.Start()
	c.URL = c.srv.URL
	t.Cleanup(func() {
		c.Release()
		c.srv.Close()
	})
	return c
}

func (c *Counter) serveEffect(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		var body struct {
			Key json.RawMessage `json:"key"`
		}
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(raw, &body); err == nil && len(body.Key) > 0 {
			var s string
			if json.Unmarshal(body.Key, &s) == nil {
				key = s
			} else {
				key = string(body.Key)
			}
		}
	}
	if key == "" {
		http.Error(w, `{"error":"missing key"}`, http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.attempts[key]++
	hold := c.hold
	fail := c.failLeft[key] > 0
	if fail {
		c.failLeft[key]--
	}
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if fail {
		http.Error(w, `{"error":"injected failure"}`, http.StatusInternalServerError)
		return
	}
	c.mu.Lock()
	c.effects[key]++
	c.total++
	resp := map[string]any{"key": key, "count": c.effects[key], "effect_id": fmt.Sprintf("eff-%d", c.total)}
	holdAnswer := c.holdAnswer
	c.mu.Unlock()
	if holdAnswer != nil {
		select {
		case <-holdAnswer:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// Count returns the number of effects performed for key.
func (c *Counter) Count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.effects[key]
}

// Attempts returns the number of requests for key, failed and held ones
// included.
func (c *Counter) Attempts(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts[key]
}

// Total returns the number of effects performed over all keys.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Counts returns a copy of the effects per key.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.effects))
	for k, v := range c.effects {
		out[k] = v
	}
	return out
}

// Keys returns the keys with at least one effect, sorted.
func (c *Counter) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.effects))
	for k := range c.effects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FailNext makes the next n requests for key answer 500 without performing
// the effect.
func (c *Counter) FailNext(key string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLeft[key] += n
}

// Hold makes requests that arrive from now on wait until Release (or until
// the client gives up) before they answer. Attempts counts them on arrival.
func (c *Counter) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold == nil {
		c.hold = make(chan struct{})
	}
}

// HoldAnswers makes effects that arrive from now on happen at once (Count
// includes them) while their answers wait until Release (or until the
// client gives up): the caller is stopped between the effect and its end.
func (c *Counter) HoldAnswers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holdAnswer == nil {
		c.holdAnswer = make(chan struct{})
	}
}

// Release lets held requests and held answers proceed and stops holding
// new ones.
func (c *Counter) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold != nil {
		close(c.hold)
		c.hold = nil
	}
	if c.holdAnswer != nil {
		close(c.holdAnswer)
		c.holdAnswer = nil
	}
}

// WaitEffects polls until at least n effects for key have been performed
// and fails the test after deadline.
func (c *Counter) WaitEffects(t testing.TB, key string, n int, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for c.Count(key) < n {
		if time.Now().After(end) {
			t.Fatalf("counter: %d of %d effects for %q within %s", c.Count(key), n, key, deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitAttempts polls until at least n requests for key have arrived (held
// ones included) and fails the test after deadline.
func (c *Counter) WaitAttempts(t testing.TB, key string, n int, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for c.Attempts(key) < n {
		if time.Now().After(end) {
			t.Fatalf("counter: %d of %d requests for %q arrived within %s", c.Attempts(key), n, key, deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
