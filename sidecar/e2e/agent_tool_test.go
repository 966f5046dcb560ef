package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The Idempotent Claim node as an AI agent's tool in a real n8n 2.41.1:
// a Webhook starts n8n's AI Agent (version 3.1, the default) whose chat
// model is n8n's OpenAI Chat Model pointed (credential Base URL) at a
// stand-in of the OpenAI chat-completions API run by the test. The
// stand-in plays an agent that follows the tools' descriptions: it claims
// the refund (Claim Refund: Key Mode Derived From the Tool Call, arguments
// order_id and amount_cents), refunds only when the claim is won (Do
// Refund: an HTTP Request tool posting to the Counter), records it (Record
// Refund: Complete with the effect's id as result reference), then repeats
// the same Claim Refund call with a new tool-call id, as a model does on a
// re-plan, and answers in words. The effect is counted by the Counter.

const (
	agentToolWorkflow = "testdata/agent-tool.json"
	agentToolSource   = "agent-refunds"
	// agentClaimNodeID is the Claim Refund tool node's id: part of its key.
	agentClaimNodeID = "7a2e5c10-4b1d-4e8f-9c3a-2f1e0d9c8b04"
	openAICredID     = "icE2eStandinLLM01"
)

// chatMessage is one message of a chat-completions request.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// text is the message's content as text (a string, or the text parts).
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(m.Content)
}

// toolResult is one tool message the stand-in was sent: which tool call it
// answers, of which tool, and its content.
type toolResult struct {
	CallID  string
	Tool    string
	Content string
}

// standInModel is a stand-in of a third-party model API: POST
// /v1/chat/completions, answered from a script that reads the tool results
// the agent sent back. It records every request's tool results.
type standInModel struct {
	URL string

	orderID string
	amount  int

	mu       sync.Mutex
	requests [][]chatMessage
	tools    [][]string
	failures []string
}

func newStandInModel(t *testing.T, orderID string, amount int) *standInModel {
	m := &standInModel{orderID: orderID, amount: amount}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.serve)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

func (m *standInModel) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	m.mu.Lock()
	m.failures = append(m.failures, msg)
	m.mu.Unlock()
	http.Error(w, `{"error":{"message":"stand-in model: unexpected request","type":"invalid_request_error"}}`, http.StatusBadRequest)
}

func (m *standInModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		m.fail(w, "reading request: %v", err)
		return
	}
	var req struct {
		Stream   bool          `json:"stream"`
		Messages []chatMessage `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		m.fail(w, "decoding request: %v", err)
		return
	}
	if req.Stream {
		m.fail(w, "a streamed completion was asked for")
		return
	}
	var tools []string
	for _, tool := range req.Tools {
		tools = append(tools, tool.Function.Name)
	}
	m.mu.Lock()
	m.requests = append(m.requests, req.Messages)
	m.tools = append(m.tools, tools)
	m.mu.Unlock()

	reply, err := m.next(req.Messages)
	if err != nil {
		m.fail(w, "%v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-standin", "object": "chat.completion", "created": 1767225600, "model": "standin-model",
		"choices": []any{map[string]any{"index": 0, "message": reply, "finish_reason": finishReason(reply), "logprobs": nil}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
	})
}

func finishReason(reply map[string]any) string {
	if _, ok := reply["tool_calls"]; ok {
		return "tool_calls"
	}
	return "stop"
}

func toolCallReply(id, name string, args map[string]any) map[string]any {
	raw, _ := json.Marshal(args)
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(raw)},
	}}}
}

func textReply(text string) map[string]any {
	return map[string]any{"role": "assistant", "content": text}
}

// results lists the tool messages of a conversation with the tool each
// answers (from the assistant's tool calls before it).
func results(messages []chatMessage) []toolResult {
	names := map[string]string{}
	var out []toolResult
	for _, msg := range messages {
		for _, call := range msg.ToolCalls {
			names[call.ID] = call.Function.Name
		}
		if msg.Role == "tool" {
			out = append(out, toolResult{CallID: msg.ToolCallID, Tool: names[msg.ToolCallID], Content: msg.text()})
		}
	}
	return out
}

// firstItemIdempotency is the idempotency object of the first item of a
// Claim Refund or Record Refund tool result (the JSON of its output items).
func firstItemIdempotency(content string) (map[string]any, error) {
	var items []struct {
		Idempotency map[string]any `json:"idempotency"`
	}
	if err := json.Unmarshal([]byte(content), &items); err != nil || len(items) == 0 || items[0].Idempotency == nil {
		return nil, fmt.Errorf("tool result is not the node's items: %.300s", content)
	}
	return items[0].Idempotency, nil
}

// next is the stand-in's script, an agent that follows the tools'
// descriptions: claim; on won refund, then record; after the first
// record, the same claim again (a repeated call, new tool-call id); a
// claim not won (or the second record) ends with a text answer. A second
// won claim would refund again: the test then sees two effects.
func (m *standInModel) next(messages []chatMessage) (map[string]any, error) {
	claimArgs := map[string]any{"order_id": m.orderID, "amount_cents": m.amount}
	done := results(messages)
	if len(done) == 0 {
		return toolCallReply("call_claim_1", "Claim_Refund", claimArgs), nil
	}
	claims := 0
	var claim map[string]any
	for _, res := range done {
		if res.Tool != "Claim_Refund" {
			continue
		}
		claims++
		idem, err := firstItemIdempotency(res.Content)
		if err != nil {
			return nil, err
		}
		claim = idem
	}
	last := done[len(done)-1]
	switch last.Tool {
	case "Claim_Refund":
		if claim["outcome"] != "won" {
			return textReply(fmt.Sprintf("Not refunding order %s again: %v", m.orderID, claim["message"])), nil
		}
		return toolCallReply(fmt.Sprintf("call_refund_%d", claims), "Do_Refund", map[string]any{"order_id": m.orderID}), nil
	case "Do_Refund":
		var effect []struct {
			EffectID string `json:"effect_id"`
		}
		if err := json.Unmarshal([]byte(last.Content), &effect); err != nil || len(effect) == 0 || effect[0].EffectID == "" {
			return nil, fmt.Errorf("Do_Refund result has no effect_id: %.300s", last.Content)
		}
		return toolCallReply(fmt.Sprintf("call_record_%d", claims), "Record_Refund", map[string]any{
			"claim_id": claim["claim_id"], "claim_token": claim["claim_token"], "result_ref": effect[0].EffectID,
		}), nil
	case "Record_Refund":
		if claims == 1 {
			return toolCallReply("call_claim_2", "Claim_Refund", claimArgs), nil
		}
		return textReply("Refunded twice."), nil
	default:
		return nil, fmt.Errorf("a result of an unknown tool %q", last.Tool)
	}
}

// derivedEventID is the event ID the node documents for Key Mode Derived
// From the Tool Call with Key Scope This Execution: "tool:" and the SHA-256
// of the RFC 8785 canonical JSON of {arguments, execution, node, workflow}
// (members in code-unit order; these values are plain ASCII and a whole
// number, written alike by encoding/json).
func derivedEventID(t *testing.T, args map[string]any, executionID, nodeID, workflowID string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"arguments": args, "execution": executionID, "node": nodeID, "workflow": workflowID}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return "tool:" + hex.EncodeToString(sum[:])
}

var executionInPrompt = regexp.MustCompile(`\(execution (\d+)\)$`)

// TestAgentToolRepeatedCallOneEffect: in one execution the agent calls the
// Claim Refund tool twice with the same arguments (new tool-call id, new
// run of the tool node): one claim is won and one refund happens; the
// second call is answered duplicate, and the tool result the model reads
// says already done with the stored result reference (the refund's
// effect id that Record Refund completed the claim with).
func TestAgentToolRepeatedCallOneEffect(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	c := StartClaimd(t, ClaimdConfig{})
	orderID := "ord_" + RandomHex(t, 6)
	const amount = 4200
	model := newStandInModel(t, orderID, amount)

	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
		{ID: openAICredID, Name: "Stand-in model (e2e)", Type: "openAiApi",
			Data: map[string]any{"apiKey": "sk-standin-" + RandomHex(t, 8), "url": model.URL + "/v1", "header": false}},
	})
	wf := WriteWorkflow(t, agentToolWorkflow, map[string]string{
		"COUNTER_URL":          counter.URL,
		"CLAIM_CREDENTIAL_ID":  claimCredID,
		"OPENAI_CREDENTIAL_ID": openAICredID,
		"CLAIM_TOOL_NODE_ID":   agentClaimNodeID,
	})
	n := StartN8N(t, N8NConfig{Workflows: []string{wf}, Credentials: []string{creds}, NodePackage: nodePackageDir})

	status, body := n.PostWebhook(t, "agent-tool", map[string]string{"prompt": "Refund order " + orderID}, nil)
	model.mu.Lock()
	requests, tools, failures := model.requests, model.tools, model.failures
	model.mu.Unlock()
	for _, f := range failures {
		t.Errorf("stand-in model: %s", f)
	}
	if status != http.StatusOK {
		t.Fatalf("agent webhook: status %d, body %.500s", status, body)
	}
	t.Logf("agent answered: %.300s", body)
	if len(requests) == 0 {
		t.Fatal("the agent never asked the stand-in model")
	}
	if want := []string{"Claim_Refund", "Do_Refund", "Record_Refund"}; !sameSet(tools[0], want) {
		t.Errorf("tools offered to the model: %v, want %v", tools[0], want)
	}

	// One effect: the repeated call did not refund again.
	checkEffects(t, counter, "refund through the agent", 1, orderID)
	if got := counter.Total(); got != 1 {
		t.Errorf("effects in all: %d, want 1", got)
	}

	// The last request holds the whole conversation: every tool result.
	final := requests[len(requests)-1]
	done := results(final)
	var sequence []string
	for _, res := range done {
		sequence = append(sequence, res.CallID)
	}
	if want := []string{"call_claim_1", "call_refund_1", "call_record_1", "call_claim_2"}; strings.Join(sequence, ",") != strings.Join(want, ",") {
		t.Fatalf("tool calls answered: %v, want %v (model requests: %d)", sequence, want, len(requests))
	}
	first, err := firstItemIdempotency(done[0].Content)
	if err != nil {
		t.Fatal(err)
	}
	second, err := firstItemIdempotency(done[3].Content)
	if err != nil {
		t.Fatal(err)
	}
	if first["outcome"] != "won" {
		t.Errorf("first Claim Refund: outcome %v, want won (%v)", first["outcome"], first["message"])
	}
	if second["outcome"] != "duplicate" {
		t.Errorf("repeated Claim Refund: outcome %v, want duplicate (%v)", second["outcome"], second["message"])
	}

	// The repeat carries the effect's reference.
	var effect []struct {
		EffectID string `json:"effect_id"`
	}
	if err := json.Unmarshal([]byte(done[1].Content), &effect); err != nil || len(effect) != 1 {
		t.Fatalf("Do_Refund result: %.300s (%v)", done[1].Content, err)
	}
	ref := effect[0].EffectID
	if second["result_ref"] != ref {
		t.Errorf("repeated Claim Refund: result_ref %v, want %s (what Record Refund completed)", second["result_ref"], ref)
	}
	wantMessage := "Already done; result_ref " + ref + "."
	if msg, _ := second["message"].(string); !strings.HasPrefix(msg, wantMessage) {
		t.Errorf("repeated Claim Refund: message %q, want it to start %q", msg, wantMessage)
	}
	if !strings.Contains(done[3].Content, `"message":"`+wantMessage) {
		t.Errorf("the tool result the model read lacks %q: %.500s", wantMessage, done[3].Content)
	}

	// The key is the node's: the documented derivation over this
	// execution, the tool node's id and the arguments, the same for both calls.
	m := executionInPrompt.FindStringSubmatch(userPrompt(final))
	if m == nil {
		t.Fatalf("no execution id in the prompt the model got: %q", userPrompt(final))
	}
	want := derivedEventID(t, map[string]any{"order_id": orderID, "amount_cents": amount}, m[1], agentClaimNodeID, n.WorkflowIDs[0])
	if first["event_id"] != want || second["event_id"] != want {
		t.Errorf("event ids %v and %v, want both %s", first["event_id"], second["event_id"], want)
	}
	if first["claim_id"] != second["claim_id"] {
		t.Errorf("claim ids %v and %v, want one claim", first["claim_id"], second["claim_id"])
	}
	rec := lookupClaim(t, c, agentToolSource, want)
	if rec.State != "completed" || rec.Attempt != 1 || rec.ResultRef != ref {
		t.Errorf("claim record: %+v, want completed, attempt 1, result_ref %s", rec, ref)
	}
	if got := metricSum(t, c, "claimd_duplicates_total"); got != 1 {
		t.Errorf("claimd_duplicates_total = %d, want 1 (the repeated call)", got)
	}
	checkNoFailedExecutions(t, n, n.WorkflowIDs[0])
}

// userPrompt is the text of the conversation's user message.
func userPrompt(messages []chatMessage) string {
	for _, msg := range messages {
		if msg.Role == "user" {
			return msg.text()
		}
	}
	return ""
}

func sameSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}
