package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Big numbers: claimd keys integers above 2^53 by their exact digits, but
// n8n parses JSON bodies with JSON.parse, which rounds them (9007199254740993
// becomes 9007199254740992). These tests send two orders whose ids are one
// apart, with other numbers a JavaScript number would change, through every
// door into n8n and check what the protected API receives.

// bigNumberPaths are the webhook paths of testdata/big-numbers.json.
const (
	bigOrdersPath = "bignum-orders" // Idempotent Claim Trigger, Exact Numbers on, source bn-orders
	bigBatchPath  = "bignum-batch"  // Idempotent Claim Trigger, Exact Numbers on, CloudEvents batch source bn-batch
	bigPlainPath  = "bignum-plain"  // Idempotent Claim Trigger, defaults, source bn-plain
	bigIngestPath = "bignum-ingest" // n8n Webhook node (Raw Body) → Code node recipe, forwarded by claimd
)

// bigOrder is the body of an order whose id is id: negative big integers,
// big integers nested in arrays and objects, a decimal with more digits
// than a double holds, a number beyond the double's range, one below it,
// -0, and plain numbers.
func bigOrder(id string) string {
	return `{"id":` + id + `,"customer":-9223372036854775809,` +
		`"lines":[{"sku":18446744073709551617,"qty":2},[9007199254740995,-9007199254740993]],` +
		`"amount":0.1000000000000000055511151231257827,"limit":1e400,"tiny":1e-400,` +
		`"zero":-0,"price":19.99,"count":42,"safe":9007199254740991}`
}

// bigOrderIDs are the two orders: one apart, both above 2^53.
var bigOrderIDs = []string{"9007199254740993", "9007199254740992"}

// wantExactOrder is the order as the protected API must receive it with
// exact numbers: every number a JavaScript number would change as a string
// of its digits as sent; -0 is 0 (the same value; claimd keys them alike).
func wantExactOrder(id string) map[string]any {
	return map[string]any{
		"id": id, "customer": "-9223372036854775809",
		"lines": []any{
			map[string]any{"sku": "18446744073709551617", "qty": json.Number("2")},
			[]any{"9007199254740995", "-9007199254740993"},
		},
		"amount": "0.1000000000000000055511151231257827", "limit": "1e400", "tiny": "1e-400",
		"zero": json.Number("0"), "price": json.Number("19.99"), "count": json.Number("42"),
		"safe": json.Number("9007199254740991"),
	}
}

// orderAPI is the protected API: it records every order posted to
// /orders, decoded with exact numbers (json.Number).
type orderAPI struct {
	URL string
	mu  sync.Mutex
	got []receivedOrder
	new chan struct{}
}

// receivedOrder is one call: which door it came through, the id as a JSON
// value (its digits as sent by n8n), and the order.
type receivedOrder struct {
	Via   string         `json:"via"`
	ID    json.Number    `json:"id"`
	Order map[string]any `json:"order"`
}

func newOrderAPI(t *testing.T) *orderAPI {
	a := &orderAPI{new: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/orders" {
			http.NotFound(w, r)
			return
		}
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var o receivedOrder
		if err := dec.Decode(&o); err != nil {
			t.Errorf("protected API: the body is not the order JSON: %v: %.300s", err, raw)
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.got = append(a.got, o)
		a.mu.Unlock()
		select {
		case a.new <- struct{}{}:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

// waitVia waits until n orders came through door via, and returns them
// sorted by id.
func (a *orderAPI) waitVia(t *testing.T, via string, n int, deadline time.Duration) []receivedOrder {
	t.Helper()
	end := time.After(deadline)
	for {
		a.mu.Lock()
		var out []receivedOrder
		for _, o := range a.got {
			if o.Via == via {
				out = append(out, o)
			}
		}
		a.mu.Unlock()
		if len(out) >= n {
			sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
			return out
		}
		select {
		case <-a.new:
		case <-end:
			t.Fatalf("%d of %d orders reached the protected API through %s within %s", len(out), n, via, deadline)
		}
	}
}

// TestBigNumbersRecipeIsREADMEs checks that the Code node the ingest path
// runs (testdata/big-numbers.json, "Exact Body") is the recipe of
// sidecar/docs/ingest.md#numbers-beyond-253-in-the-forwarded-body,
// character for character.
func TestBigNumbersRecipeIsREADMEs(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "docs", "ingest.md"))
	if err != nil {
		t.Fatalf("reading sidecar/docs/ingest.md: %v", err)
	}
	const heading = "## Numbers beyond 2^53 in the forwarded body\n"
	_, section, ok := strings.Cut(string(readme), heading)
	if !ok {
		t.Fatalf("sidecar/docs/ingest.md has no section %q", strings.TrimSpace(heading))
	}
	_, block, ok := strings.Cut(section, "```js\n")
	recipe, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatalf("sidecar/docs/ingest.md: no js code block in %q", strings.TrimSpace(heading))
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "big-numbers.json"))
	if err != nil {
		t.Fatalf("reading the workflow: %v", err)
	}
	var wf struct {
		Nodes []struct {
			Name       string `json:"name"`
			Parameters struct {
				JSCode string `json:"jsCode"`
			} `json:"parameters"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("the workflow: %v", err)
	}
	for _, node := range wf.Nodes {
		if node.Name == "Exact Body" {
			if strings.TrimRight(node.Parameters.JSCode, "\n") != recipe {
				t.Errorf("the workflow's Code node differs from the recipe of sidecar/docs/ingest.md:\n%s\ningest.md:\n%s", node.Parameters.JSCode, recipe)
			}
			return
		}
	}
	t.Fatalf("the workflow has no Exact Body node")
}

// TestBigNumbersReachTheEffectExactly drives two orders one apart (ids
// 9007199254740993 and 9007199254740992) through a real n8n: the trigger
// with Exact Numbers (one request each, and both in one CloudEvents batch),
// the trigger with its defaults (n8n's rounding, the fault shown), and
// claimd's ingest door forwarding to a Webhook node with Raw Body and the
// Code-node recipe of sidecar/docs/ingest.md. With exact numbers each order
// is its own effect with its own digits.
func TestBigNumbersReachTheEffectExactly(t *testing.T) {
	t.Parallel()
	runBigNumbers(t, false)
}

// TestBigNumbersQueueMode runs the same in queue mode: the main process
// runs the trigger and the Webhook node, a worker runs the executions (the
// Code node reads the raw body from n8n's binary data store there).
func TestBigNumbersQueueMode(t *testing.T) {
	t.Parallel()
	runBigNumbers(t, true)
}

func runBigNumbers(t *testing.T, queue bool) {
	api := newOrderAPI(t)
	token := RandomHex(t, 24)
	n8nPort := FreePort(t)
	sources := filepath.Join(t.TempDir(), "sources.yaml")
	if err := os.WriteFile(sources, []byte(fmt.Sprintf(`sources:
  bn-orders:
    tenant: e2e
    provider: token
    secrets: [%[1]q]
    options: {header: X-Orders-Token, key: {id_pointers: ["/id"]}}
  bn-plain:
    tenant: e2e
    provider: token
    secrets: [%[1]q]
    options: {header: X-Orders-Token, key: {id_pointers: ["/id"]}}
  bn-batch:
    tenant: e2e
    provider: cloudevents
    secrets: [%[1]q]
  bn-ingest:
    tenant: e2e
    provider: token
    secrets: [%[1]q]
    options: {header: X-Orders-Token, key: {id_pointers: ["/id"]}}
    forward:
      url: "http://127.0.0.1:%[2]d/webhook/%[3]s"
      require_claim: false
      max_attempts: 20
      backoff_base_seconds: 1
      backoff_cap_seconds: 2
`, token, n8nPort, bigIngestPath)), 0o600); err != nil {
		t.Fatalf("writing sources file: %v", err)
	}
	c := StartClaimd(t, ClaimdConfig{Env: map[string]string{"CLAIMD_SOURCES_FILE": sources}})
	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
	})
	wf := WriteWorkflow(t, filepath.Join("testdata", "big-numbers.json"), map[string]string{
		"CREDENTIAL_ID": claimCredID, "TARGET_URL": api.URL,
	})
	cfg := N8NConfig{Workflows: []string{wf}, Credentials: []string{creds}, NodePackage: nodePackageDir, Port: n8nPort}
	if queue {
		cfg.Queue, cfg.Workers = true, 1
	}
	n := StartN8N(t, cfg)

	orderHeaders := map[string]string{"X-Orders-Token": token}
	for _, path := range []string{bigOrdersPath, bigPlainPath} {
		for _, id := range bigOrderIDs {
			if a := post(t, n.WebhookURL(path), []byte(bigOrder(id)), orderHeaders); a.Code != http.StatusOK {
				t.Fatalf("order %s to %s: %s", id, path, a)
			}
		}
	}
	var batch []string
	for i, id := range bigOrderIDs {
		batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","id":"bn-%d","source":"/e2e/shop",`+
			`"type":"order.created","datacontenttype":"application/json","data":%s}`, i, bigOrder(id)))
	}
	if a := post(t, n.WebhookURL(bigBatchPath), []byte("["+strings.Join(batch, ",")+"]"), map[string]string{
		"Content-Type": "application/cloudevents-batch+json", "Authorization": "Bearer " + token,
	}); a.Code != http.StatusOK {
		t.Fatalf("the CloudEvents batch: %s", a)
	}
	for _, id := range bigOrderIDs {
		if a := post(t, c.URL()+"/ingest/bn-ingest", []byte(bigOrder(id)), orderHeaders); a.Code/100 != 2 {
			t.Fatalf("order %s to claimd's ingest door: %s", id, a)
		}
	}

	const deadline = 2 * time.Minute
	// Exact: the trigger (two single deliveries and one batch of both) and
	// the ingest door give the API each order's own digits: two effects
	// per door, no collision.
	for via, want := range map[string]int{"trigger": 4, "ingest": 2} {
		got := api.waitVia(t, via, want, deadline)
		perID := map[string]int{}
		for _, o := range got {
			perID[o.ID.String()]++
			if !reflect.DeepEqual(o.Order, wantExactOrder(o.ID.String())) {
				t.Errorf("%s: order %s reached the API as\n%#v\nwant\n%#v", via, o.ID, o.Order, wantExactOrder(o.ID.String()))
			}
		}
		wantPerID := map[string]int{bigOrderIDs[0]: want / 2, bigOrderIDs[1]: want / 2}
		if !reflect.DeepEqual(perID, wantPerID) {
			t.Errorf("%s: effects per order id %v, want %v", via, perID, wantPerID)
		}
	}
	// Defaults (source bn-plain, its own keys): claimd keeps the two orders
	// apart, but n8n's JSON.parse has rounded both ids to 9007199254740992,
	// and 1e400 to Infinity, which JSON.stringify writes as null: the fault
	// Exact Numbers is for.
	plain := api.waitVia(t, "plain", 2, deadline)
	for _, o := range plain {
		if o.ID.String() != "9007199254740992" || o.Order["limit"] != nil || o.Order["amount"] != json.Number("0.1") {
			t.Errorf("plain trigger: id %s, limit %v, amount %v; want n8n's rounding (9007199254740992, null, 0.1)",
				o.ID, o.Order["limit"], o.Order["amount"])
		}
	}
	// claimd keyed the orders by their exact digits on every door: one
	// record each, and a copy of an order is no new execution (its claim is
	// still processing here: no settle hook, so 503 in_progress).
	for _, source := range []string{"bn-orders", "bn-plain", "bn-ingest"} {
		seen := map[string]bool{}
		for _, id := range bigOrderIDs {
			rec, found := findClaim(t, c, source, id)
			if !found || seen[rec.ClaimID] {
				t.Errorf("%s: order %s has no record of its own (found %v, claim %q)", source, id, found, rec.ClaimID)
			}
			seen[rec.ClaimID] = true
		}
	}
	for _, id := range bigOrderIDs {
		if a := post(t, n.WebhookURL(bigOrdersPath), []byte(bigOrder(id)), orderHeaders); a.Code/100 == 2 {
			t.Errorf("a copy of order %s was answered %s, want no 2xx while its claim is processing", id, a)
		}
	}
	api.mu.Lock()
	calls := len(api.got)
	api.mu.Unlock()
	if calls != 8 {
		t.Errorf("the protected API was called %d times, want 8", calls)
	}
}
