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
// Two workflows, alike but for the Claim Refund tool's Key Scope: This
// Execution, and The Chat Session (Session ID from the webhook body's
// session, as a Chat Trigger's sessionId would be).

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

	mu       sync.Mutex
	requests [][]chatMessage
	tools    [][]string
	failures []string
}

func newStandInModel(t *testing.T) *standInModel {
	m := &standInModel{}
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
	asked := promptPattern.FindStringSubmatch(userPrompt(messages))
	if asked == nil {
		return nil, fmt.Errorf("a prompt that names no order: %q", userPrompt(messages))
	}
	orderID := asked[1]
	claimArgs := map[string]any{"order_id": orderID, "amount_cents": agentRefundCents}
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
			return textReply(fmt.Sprintf("Not refunding order %s again: %v", orderID, claim["message"])), nil
		}
		return toolCallReply(fmt.Sprintf("call_refund_%d", claims), "Do_Refund", map[string]any{"order_id": orderID}), nil
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
// From the Tool Call: "tool:" and the SHA-256 of the RFC 8785 canonical
// JSON of {arguments, node, workflow} and the scope ({"execution": id} or
// {"session": id}). Members come in code-unit order and these values are
// plain ASCII text and a whole number, which encoding/json writes alike.
func derivedEventID(t *testing.T, args map[string]any, scope map[string]string, workflowID string) string {
	t.Helper()
	key := map[string]any{"arguments": args, "node": agentClaimNodeID, "workflow": workflowID}
	for k, v := range scope {
		key[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(key); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return "tool:" + hex.EncodeToString(sum[:])
}

// The agent's prompt: "Refund order <id> (execution <n8n execution id>)",
// the webhook body's prompt and the execution the workflow adds.
var promptPattern = regexp.MustCompile(`^Refund order (\S+) \(execution (\d+)\)$`)

// agentRefundCents is the amount_cents argument of every refund.
const agentRefundCents = 4200

// conversation is one run of the agent workflow as the stand-in model saw
// it: the webhook's answer, the execution named in the prompt, every tool
// result in order, the idempotency object of each Claim Refund result and
// the effect id of each Do Refund result.
type conversation struct {
	answer    string
	execution string
	tools     []string
	results   []toolResult
	claims    []map[string]any
	effects   []string
}

// callIDs lists the tool calls answered, in order.
func (c conversation) callIDs() string {
	var ids []string
	for _, res := range c.results {
		ids = append(ids, res.CallID)
	}
	return strings.Join(ids, ",")
}

// ask posts one prompt to the agent workflow at path (session: the chat
// session the workflow's Session ID reads, body.session) and returns the
// conversation, read from the last request the stand-in got for it. Calls
// are made one after another.
func (m *standInModel) ask(t *testing.T, n *N8N, path, orderID, session string) conversation {
	t.Helper()
	m.mu.Lock()
	before := len(m.requests)
	m.mu.Unlock()
	status, body := n.PostWebhook(t, path, map[string]string{"prompt": "Refund order " + orderID, "session": session}, nil)
	m.mu.Lock()
	requests, tools, failures := m.requests[before:], m.tools[before:], m.failures
	m.failures = nil
	m.mu.Unlock()
	for _, f := range failures {
		t.Errorf("stand-in model: %s", f)
	}
	if status != http.StatusOK {
		t.Fatalf("agent webhook %s: status %d, body %.500s", path, status, body)
	}
	if len(requests) == 0 {
		t.Fatalf("agent webhook %s: the agent never asked the stand-in model", path)
	}
	final := requests[len(requests)-1]
	asked := promptPattern.FindStringSubmatch(userPrompt(final))
	if asked == nil || asked[1] != orderID {
		t.Fatalf("the prompt the model got: %q, want the order %s and an execution id", userPrompt(final), orderID)
	}
	c := conversation{answer: string(body), execution: asked[2], tools: tools[0], results: results(final)}
	for _, res := range c.results {
		switch res.Tool {
		case "Claim_Refund":
			idem, err := firstItemIdempotency(res.Content)
			if err != nil {
				t.Fatal(err)
			}
			c.claims = append(c.claims, idem)
		case "Do_Refund":
			var effect []struct {
				EffectID string `json:"effect_id"`
			}
			if err := json.Unmarshal([]byte(res.Content), &effect); err != nil || len(effect) != 1 || effect[0].EffectID == "" {
				t.Fatalf("Do_Refund result: %.300s (%v)", res.Content, err)
			}
			c.effects = append(c.effects, effect[0].EffectID)
		}
	}
	t.Logf("%s: execution %s, tool calls %s, answer %.200s", path, c.execution, c.callIDs(), c.answer)
	return c
}

// checkDuplicateAnswer checks a Claim Refund result that must be a
// duplicate carrying ref: its outcome, result_ref, and the sentence the
// model reads.
func checkDuplicateAnswer(t *testing.T, what string, idem map[string]any, ref string) {
	t.Helper()
	if idem["outcome"] != "duplicate" {
		t.Errorf("%s: outcome %v, want duplicate (%v)", what, idem["outcome"], idem["message"])
	}
	if idem["result_ref"] != ref {
		t.Errorf("%s: result_ref %v, want %s (what Record Refund completed the claim with)", what, idem["result_ref"], ref)
	}
	want := "Already done; result_ref " + ref + "."
	if msg, _ := idem["message"].(string); !strings.HasPrefix(msg, want) {
		t.Errorf("%s: message %q, want it to start %q", what, msg, want)
	}
}

// TestAgentToolRepeatedCallOneEffect: the agent calls the Claim Refund tool
// twice with the same arguments in one execution (new tool-call id, new
// run of the tool node): one claim is won and one refund happens; the
// second call is answered duplicate, and the tool result the model reads
// says already done with the stored result reference (the refund's effect
// id that Record Refund completed the claim with). The key is the
// documented derivation. With Key Scope This Execution the next execution
// is a new scope; with The Chat Session, a resumed conversation (a new
// execution, the same session) does not refund again, another session does.
func TestAgentToolRepeatedCallOneEffect(t *testing.T) {
	t.Parallel()
	counter := NewCounter(t)
	c := StartClaimd(t, ClaimdConfig{})
	model := newStandInModel(t)

	creds := WriteJSON(t, "credentials.json", []credential{
		claimCredential(claimCredID, "Idempotent Claim API (e2e)", c.URL(), c.APIKey),
		{ID: openAICredID, Name: "Stand-in model (e2e)", Type: "openAiApi",
			Data: map[string]any{"apiKey": "sk-standin-" + RandomHex(t, 8), "url": model.URL + "/v1", "header": false}},
	})
	workflow := func(id, path, scope string) string {
		return WriteWorkflow(t, agentToolWorkflow, map[string]string{
			"WORKFLOW_ID":          id,
			"PATH":                 path,
			"KEY_SCOPE":            scope,
			"HOOK_ID":              uuidLike(t),
			"PROBE_HOOK_ID":        uuidLike(t),
			"COUNTER_URL":          counter.URL,
			"CLAIM_CREDENTIAL_ID":  claimCredID,
			"OPENAI_CREDENTIAL_ID": openAICredID,
			"CLAIM_TOOL_NODE_ID":   agentClaimNodeID,
		})
	}
	n := StartN8N(t, N8NConfig{
		Workflows: []string{
			workflow("icE2eAgentTool01", "agent-tool", "execution"),
			workflow("icE2eAgentTool02", "agent-session", "session"),
		},
		Credentials: []string{creds},
		NodePackage: nodePackageDir,
	})
	perExecution, perSession := n.WorkflowIDs[0], n.WorkflowIDs[1]
	args := func(orderID string) map[string]any {
		return map[string]any{"order_id": orderID, "amount_cents": agentRefundCents}
	}

	orderID := "ord_" + RandomHex(t, 6)
	var first conversation
	t.Run("same call twice in one execution", func(t *testing.T) {
		first = model.ask(t, n, "agent-tool", orderID, "")
		if want := []string{"Claim_Refund", "Do_Refund", "Record_Refund"}; !sameSet(first.tools, want) {
			t.Errorf("tools offered to the model: %v, want %v", first.tools, want)
		}
		// One effect: the repeated call did not refund again.
		checkEffects(t, counter, "refund through the agent", 1, orderID)
		if want := "call_claim_1,call_refund_1,call_record_1,call_claim_2"; first.callIDs() != want {
			t.Fatalf("tool calls answered: %s, want %s", first.callIDs(), want)
		}
		won, repeat, ref := first.claims[0], first.claims[1], first.effects[0]
		if won["outcome"] != "won" {
			t.Errorf("first Claim Refund: outcome %v, want won (%v)", won["outcome"], won["message"])
		}
		checkDuplicateAnswer(t, "repeated Claim Refund", repeat, ref)
		// The model read it as the tool's result, word for word.
		if !strings.Contains(first.results[3].Content, `"message":"Already done; result_ref `+ref+`.`) {
			t.Errorf("the tool result the model read: %.500s", first.results[3].Content)
		}
		// The key is the node's: the documented derivation over this
		// execution, the tool node's id, the workflow and the arguments.
		want := derivedEventID(t, args(orderID), map[string]string{"execution": first.execution}, perExecution)
		if won["event_id"] != want || repeat["event_id"] != want || won["claim_id"] != repeat["claim_id"] {
			t.Errorf("claims %v/%v and %v/%v, want one claim with event id %s",
				won["claim_id"], won["event_id"], repeat["claim_id"], repeat["event_id"], want)
		}
		rec := lookupClaim(t, c, agentToolSource, want)
		if rec.State != "completed" || rec.Attempt != 1 || rec.ResultRef != ref {
			t.Errorf("claim record: %+v, want completed, attempt 1, result_ref %s", rec, ref)
		}
	})

	t.Run("This Execution: the next execution is a new scope", func(t *testing.T) {
		again := model.ask(t, n, "agent-tool", orderID, "")
		if len(again.claims) == 0 || again.claims[0]["outcome"] != "won" || len(first.claims) == 0 ||
			again.claims[0]["event_id"] == first.claims[0]["event_id"] {
			t.Fatalf("a new execution's first claim: %v, want won under a new key", again.claims)
		}
		checkEffects(t, counter, "the same refund asked in a second execution (documented)", 2, orderID)
	})

	t.Run("The Chat Session: a resumed conversation does not repeat", func(t *testing.T) {
		order := "ord_" + RandomHex(t, 6)
		session := "chat-" + RandomHex(t, 6)
		opened := model.ask(t, n, "agent-session", order, session)
		if want := "call_claim_1,call_refund_1,call_record_1,call_claim_2"; opened.callIDs() != want {
			t.Fatalf("tool calls answered: %s, want %s", opened.callIDs(), want)
		}
		ref := opened.effects[0]
		checkDuplicateAnswer(t, "repeated Claim Refund in the session", opened.claims[1], ref)

		resumed := model.ask(t, n, "agent-session", order, session)
		if resumed.execution == opened.execution {
			t.Fatalf("the resumed conversation ran in execution %s again", resumed.execution)
		}
		if want := "call_claim_1"; resumed.callIDs() != want {
			t.Fatalf("resumed conversation's tool calls: %s, want %s (no refund)", resumed.callIDs(), want)
		}
		checkDuplicateAnswer(t, "Claim Refund in the resumed conversation", resumed.claims[0], ref)
		checkEffects(t, counter, "refund asked again in the same chat session", 1, order)

		want := derivedEventID(t, args(order), map[string]string{"session": session}, perSession)
		if opened.claims[0]["event_id"] != want || resumed.claims[0]["event_id"] != want {
			t.Errorf("event ids %v and %v, want both %s", opened.claims[0]["event_id"], resumed.claims[0]["event_id"], want)
		}

		other := model.ask(t, n, "agent-session", order, "chat-"+RandomHex(t, 6))
		if len(other.claims) == 0 || other.claims[0]["outcome"] != "won" {
			t.Fatalf("another session's first claim: %v, want won", other.claims)
		}
		checkEffects(t, counter, "the same refund asked in another chat session", 2, order)
	})

	checkNoFailedExecutions(t, n, perExecution)
	checkNoFailedExecutions(t, n, perSession)
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
