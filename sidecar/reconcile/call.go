package reconcile

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/idempotent-claim/idempotent-claim/sidecar/internal/netfail"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// Results of a call, the result label of claimd_reconcile_calls_total,
// counted once when the call ends, by what ended it: the verdict the
// reconciler answered first (in its response, or through the API), a
// failure class (also the reconcile's last_error; a call answered
// neither way by its deadline is a timeout), or fenced (its answer came
// after the claim was settled by its holder or an operator: nothing
// applied). An answer to a call that had ended (a repeat, another
// verdict, an answer after the deadline) is not counted, so the sum over
// results is the calls made, and the failure classes over it the share
// of calls that failed (ClaimdReconcilerFailing).
const (
	ResultDone         = "done"
	ResultNotDone      = "not_done"
	ResultStillUnknown = "still_unknown"
	ResultTimeout      = "timeout"
	ResultUnreachable  = "unreachable"
	ResultStatus4xx    = "status_4xx"
	ResultStatus5xx    = "status_5xx"
	ResultBadAnswer    = "bad_answer"
	ResultFenced       = "fenced"
)

// Results lists every result, each started at 0 per reconciler.
var Results = []string{ResultDone, ResultNotDone, ResultStillUnknown, ResultTimeout, ResultUnreachable,
	ResultStatus4xx, ResultStatus5xx, ResultBadAnswer, ResultFenced}

// Verdicts a reconciler answers.
const (
	VerdictDone         = "done"
	VerdictNotDone      = "not_done"
	VerdictStillUnknown = "still_unknown"
)

// Limits of an answer, as the operator's resolve takes them (result_ref
// up to 2000 bytes, note up to 4000).
const (
	MaxResultRef = 2000
	MaxNote      = 4000
	// MaxAnswerBytes bounds the response body read from a reconciler.
	MaxAnswerBytes = 64 << 10
)

// UserAgent is the User-Agent of every call.
const UserAgent = "claimd-reconcile"

// Answer is a reconciler's verdict with what it found.
type Answer struct {
	Verdict   string
	ResultRef string
	Note      string
}

// answerJSON is an answer on the wire; a nil Verdict is no answer (the
// reconciler answers later through the API).
type answerJSON struct {
	Verdict   *string `json:"verdict"`
	ResultRef *string `json:"result_ref"`
	Note      *string `json:"note"`
}

// outcome is what one call came to: an answer, async (2xx without a
// verdict), or a failure class (fail).
type outcome struct {
	answer Answer
	async  bool
	fail   string
}

// post makes one call: POST body to url with headers, within ctx (the
// call's timeout). Redirects are never followed (a 3xx is a bad answer: a
// reconciler URL that redirects is a configuration to fix). The response
// body is read up to MaxAnswerBytes and never logged.
func post(ctx context.Context, rt http.RoundTripper, url string, headers map[string]string, body []byte) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return outcome{fail: ResultUnreachable} // validated when the file loaded; not quoted (it is the URL)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	// The transport, not a client: a client parses a redirect's Location
	// before any redirect policy is asked, and never follows it here.
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return outcome{fail: transportResult(ctx, err)}
	}
	defer resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
		return outcome{fail: ResultStatus5xx}
	case s >= 400:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
		return outcome{fail: ResultStatus4xx}
	case s < 200 || s > 299:
		return outcome{fail: ResultBadAnswer}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		if r := transportResult(ctx, err); r != ResultUnreachable {
			return outcome{fail: r}
		}
		return outcome{fail: ResultBadAnswer}
	}
	if len(b) > MaxAnswerBytes {
		return outcome{fail: ResultBadAnswer}
	}
	return parseAnswer(b)
}

// transportResult is the result of a call that got no readable answer.
func transportResult(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ResultTimeout
	}
	switch class, _ := netfail.Classify(err); class {
	case netfail.Timeout:
		return ResultTimeout
	case netfail.Unreadable:
		return ResultBadAnswer
	}
	return ResultUnreachable
}

// parseAnswer reads a 2xx response body: empty, or a JSON object (or an
// array of exactly one object, as n8n's "All Entries" response sends)
// without a verdict member, is async; an object with a valid verdict is
// the answer; anything else (not JSON, duplicate or case-variant member
// names, another verdict, a result_ref or note past its limit) is a bad
// answer.
func parseAnswer(b []byte) outcome {
	b = bytes.TrimSpace(strictjson.TrimBOM(b))
	if len(b) == 0 {
		return outcome{async: true}
	}
	var a answerJSON
	switch b[0] {
	case '{':
		if strictjson.Unmarshal(b, &a) != nil {
			return outcome{fail: ResultBadAnswer}
		}
	case '[':
		var list []answerJSON
		if strictjson.Unmarshal(b, &list) != nil || len(list) != 1 {
			return outcome{fail: ResultBadAnswer}
		}
		a = list[0]
	default:
		return outcome{fail: ResultBadAnswer}
	}
	if a.Verdict == nil {
		return outcome{async: true}
	}
	ans := Answer{Verdict: *a.Verdict}
	if a.ResultRef != nil {
		ans.ResultRef = *a.ResultRef
	}
	if a.Note != nil {
		ans.Note = *a.Note
	}
	if !ValidVerdict(ans.Verdict) || len(ans.ResultRef) > MaxResultRef || len(ans.Note) > MaxNote ||
		!utf8.ValidString(ans.ResultRef) || !utf8.ValidString(ans.Note) || strings.ContainsRune(ans.ResultRef, 0) {
		return outcome{fail: ResultBadAnswer}
	}
	return outcome{answer: ans}
}

// ValidVerdict reports whether v is done, not_done or still_unknown.
func ValidVerdict(v string) bool {
	return v == VerdictDone || v == VerdictNotDone || v == VerdictStillUnknown
}
