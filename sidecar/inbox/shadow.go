package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db"
	"github.com/idempotent-claim/idempotent-claim/sidecar/db/dbsqlc"
	"github.com/idempotent-claim/idempotent-claim/sidecar/sources"
)

// Shadow mode on an ingest door (shadow: true with forward.url): an
// observe-only pass-through. Every verified delivery, each copy, is
// posted at once to forward.url as the provider would have posted it to
// n8n without claimd, and n8n's answer is relayed to the provider, which
// therefore retries exactly as it did before. Meanwhile each event is
// claimed as a shadow claim (claim.Request.Shadow) by the claim statement
// every claim runs: the record and its delivery log say what claimd
// would have decided (won, duplicate, in_progress, conflict…, with the
// cause), marked shadow. Nothing else is stored: no inbox row, no
// dispatch job. Because the records are real, turning shadow off later
// decides the next copy of an event seen in shadow against them: a
// duplicate of a completed one, not dispatched again. A record that no
// forward completed (failed, dead-lettered, or its lease ended without a
// settle under lease policy reclaim) has no inbox row; the enforcing
// door's next copy of its payload adopts it (claim.Receipt.Adopted): that
// copy's body becomes its inbox row and its dispatch is queued, once. A
// record whose forward is still in flight is not adopted: the forward's
// outcome reaches the provider, which delivers a failure again.
//
// What claimd cannot verify is refused exactly as the door refuses it
// when enforcing (the caller runs the source's rules first), and never
// forwarded.

// MaxShadowReplyBytes is the largest body of forward.url's answer relayed
// to the provider, in bytes; a longer body is not relayed (the status
// is), as a cut body would be another answer.
const MaxShadowReplyBytes = 64 << 10

// ShadowDelivery is one verified delivery of a source in shadow.
type ShadowDelivery struct {
	// Events are the delivery's verified events (sources.Verified.Events).
	Events []sources.Event
	// Body is the raw request body, byte for byte as received.
	Body []byte
	// Header holds the request's headers as received.
	Header http.Header
	// ClaimTimeout bounds the claims (the server's request timeout); 0
	// leaves them bound by ctx only.
	ClaimTimeout time.Duration
}

// ShadowAnswer is what a shadow delivery gets: forward.url's answer to
// relay, or the failure to reach it, and the shadow decisions.
type ShadowAnswer struct {
	// Status is forward.url's status; 0 when it gave none (Failure says
	// why).
	Status int
	// ContentType and RetryAfter are those headers of the answer, "" when
	// absent; the only headers relayed (a Location, cookies or anything
	// else of n8n's stays here).
	ContentType, RetryAfter string
	// Body is the answer's body, nil when longer than MaxShadowReplyBytes
	// (BodyDropped).
	Body        []byte
	BodyDropped bool
	// Failure is set when forward.url gave no answer: ShadowTimeout (no
	// answer within forward.timeout_seconds) or ShadowUnreachable.
	Failure ShadowFailure
	// Results are the events' shadow claims, in event order: Outcome won,
	// WouldBe the decision.
	Results []claim.Result
}

// ShadowFailure is why a shadow forward got no answer.
type ShadowFailure string

// Shadow forward failures.
const (
	// ShadowTimeout: forward.url did not answer within
	// forward.timeout_seconds.
	ShadowTimeout ShadowFailure = "timeout"
	// ShadowUnreachable: the request could not be sent or its answer not
	// read (connection refused, reset, DNS).
	ShadowUnreachable ShadowFailure = "unreachable"
)

// shadowLease is the lease of the copy that would win: the forward's
// timeout plus sources.DispatchLeaseGrace, so that the lease outlives the forward
// it is settled by (sources.Parse refuses a max_lease_seconds shorter).
func shadowLease(src *sources.Source) time.Duration {
	return src.Forward.Timeout + sources.DispatchLeaseGrace
}

// Shadow runs one verified delivery of src, a source in shadow with a
// forward target, as an observe-only pass-through:
//
//  1. each event is claimed as a shadow claim (one statement per claim,
//     as any claim; several events in one transaction, ClaimBatch) with
//     the source's scope, key and receipt hash, Door the source, and the
//     lease shadowLease; its record keeps the receipt hash as an enforcing
//     door's first delivery would (AdoptReceipts);
//  2. the raw body is posted once to forward.url (shadowRequest: the
//     provider's headers less hop-by-hop ones, forward.headers, and for a
//     delivery of one event the dispatcher's idempotency headers), with
//     the dispatcher's HTTP client and its rules: forward.url only, no
//     redirect followed, forward.timeout_seconds;
//  3. the claim that would have won (it holds the claim token) is settled
//     by the forward's answer, fenced by its token: a 2xx completes it
//     with result_ref "forward: HTTP <status>", anything else (another
//     status, a timeout, no connection) fails it retryable. A settle that
//     fails is logged, never the provider's answer: n8n had the delivery.
//
// Errors: Invalid for a delivery without events; the claims' errors
// (Unavailable when the ledger cannot decide: nothing was forwarded, the
// provider should deliver again; Invalid for a claim the ledger refuses).
// A forward that gets no answer is no error: ShadowAnswer.Failure.
func (in *Inbox) Shadow(ctx context.Context, src *sources.Source, d ShadowDelivery) (ShadowAnswer, error) {
	if len(d.Events) == 0 {
		return ShadowAnswer{}, apperr.New(apperr.Invalid, "the delivery carries no event")
	}
	// The forward's deadline counts from before the claims, so that it
	// ends before the lease they take (the database's now() plus
	// shadowLease).
	deadline := time.Now().Add(src.Forward.Timeout)
	results, err := in.shadowClaims(ctx, src, d)
	if err != nil {
		return ShadowAnswer{}, err
	}
	in.adoptReceipts(ctx, src, d, results)
	ans := in.shadowForward(ctx, src, d, deadline)
	ans.Results = results
	in.shadowSettle(ctx, src, &ans)
	return ans, nil
}

// shadowClaims claims the events of d as shadow claims.
func (in *Inbox) shadowClaims(ctx context.Context, src *sources.Source, d ShadowDelivery) ([]claim.Result, error) {
	if d.ClaimTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.ClaimTimeout)
		defer cancel()
	}
	reqs := make([]claim.Request, len(d.Events))
	for i, ev := range d.Events {
		reqs[i] = ev.Request
		reqs[i].Shadow = true
		reqs[i].Lease = shadowLease(src)
		if err := in.ledger.Validate(reqs[i]); err != nil {
			return nil, err
		}
	}
	if len(reqs) == 1 {
		res, err := in.ledger.Claim(ctx, reqs[0])
		if err != nil {
			return nil, err
		}
		return []claim.Result{res}, nil
	}
	return in.ledger.ClaimBatch(ctx, reqs)
}

// adoptReceipts gives the records of results (the claims of d's events,
// in order) the receipt hash that an enforcing door gives a record on its
// first provider delivery (AdoptReceipts), bounded by d.ClaimTimeout. A failure
// is logged, not returned: the claims are decided and the copy that would
// have won holds its lease, so the delivery goes on; such a record takes
// its receipt hash from the first delivery after shadow is turned off.
func (in *Inbox) adoptReceipts(ctx context.Context, src *sources.Source, d ShadowDelivery, results []claim.Result) {
	if d.ClaimTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), d.ClaimTimeout)
		defer cancel()
	}
	ids, hashes := make([]string, len(results)), make([]string, len(results))
	for i, r := range results {
		ids[i], hashes[i] = r.ID, d.Events[i].Request.PayloadHash
	}
	if err := queries.AdoptReceipts(ctx, in.pool, dbsqlc.AdoptReceiptsParams{IDs: ids, Hashes: hashes}); err != nil {
		in.log.Warn().Err(db.Error(err)).Str("source", src.Name).
			Msg("shadow copies' receipt hash not recorded; the first delivery after shadow is turned off gives it")
	}
}

// hopByHop are the header fields a proxy does not pass on (RFC 9110
// §7.6.1: Connection and the fields it names, Proxy-Connection,
// Keep-Alive, TE, Transfer-Encoding, Upgrade; RFC 9112 §6 for framing),
// with the fields the transport sets itself for the new request (Host,
// Content-Length, Expect) and Accept-Encoding, left to the transport so
// that an answer comes back decoded.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Proxy-Authenticate", "Proxy-Authorization", "Host", "Content-Length", "Expect", "Accept-Encoding"}

// ownHeaders are the dispatcher's headers (post): a provider's field of
// one of these names never passes through.
var ownHeaders = []string{HeaderIdempotencyKey, HeaderInboxID, HeaderSource, HeaderEventID, HeaderEventType, HeaderAttempt}

// shadowRequest builds the forward of d: POST forward.url with the raw
// body and
//   - the provider's headers as received (their signature among them: the
//     workflow received them from the provider before claimd, and may
//     check them), less hop-by-hop fields (hopByHop, and the fields the
//     Connection header names), values no HTTP client can send, and the
//     dispatcher's own names (ownHeaders, X-Idempotency-*);
//   - forward.headers, replacing a provider field of the same name;
//   - for a delivery of one event, the dispatcher's Idempotency-Key,
//     X-Idempotency-Source and X-Idempotency-Event-Id (and -Event-Type);
//     none for a batch, whose events share the one body. No X-Inbox-Id
//     (there is no inbox record) and no X-Dispatch-Attempt (no dispatch).
//
// The query string of the delivery is not forwarded: forward.url is the
// target as configured, as for the dispatcher.
func shadowRequest(ctx context.Context, src *sources.Source, d ShadowDelivery) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, src.Forward.URL, bytes.NewReader(d.Body))
	if err != nil {
		return nil, err
	}
	drop := map[string]bool{}
	for _, h := range hopByHop {
		drop[http.CanonicalHeaderKey(h)] = true
	}
	for _, h := range ownHeaders {
		drop[http.CanonicalHeaderKey(h)] = true
	}
	for _, v := range d.Header.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				drop[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	for k, vs := range d.Header {
		ck := http.CanonicalHeaderKey(k)
		if drop[ck] || strings.HasPrefix(ck, "X-Idempotency-") {
			continue
		}
		for _, v := range vs {
			if sendableHeaderValue(v) {
				req.Header.Add(ck, v)
			}
		}
	}
	for k, v := range src.Forward.Headers {
		req.Header.Set(k, v)
	}
	if len(d.Events) == 1 {
		r := d.Events[0].Request
		req.Header.Set(HeaderIdempotencyKey, claim.IdempotencyKey(r.Tenant, claim.Key{Source: r.Source, EventID: r.EventID}))
		req.Header.Set(HeaderSource, r.Source)
		req.Header.Set(HeaderEventID, sources.HeaderValue(r.EventID))
		if r.EventType != "" {
			req.Header.Set(HeaderEventType, sources.HeaderValue(r.EventType))
		}
	}
	return req, nil
}

// shadowForward posts d to forward.url (shadowRequest) through the
// dispatcher's transport, never following a redirect, within deadline,
// and reads its answer (a body up to MaxShadowReplyBytes).
func (in *Inbox) shadowForward(ctx context.Context, src *sources.Source, d ShadowDelivery, deadline time.Time) ShadowAnswer {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	req, err := shadowRequest(ctx, src, d)
	if err != nil {
		in.log.Warn().Str("source", src.Name).Str("reason", transportError(err)).Msg("shadow forward not sent")
		return ShadowAnswer{Failure: ShadowUnreachable}
	}
	// The transport, not the client, as the dispatcher posts (post): no
	// redirect is followed, and a Location is never parsed into an error.
	rt := in.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return in.shadowFailed(src, err)
	}
	defer resp.Body.Close()
	ans := ShadowAnswer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		RetryAfter: resp.Header.Get("Retry-After")}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxShadowReplyBytes+1))
	switch {
	case err != nil:
		// The status came, the body did not: the status is the answer.
		in.log.Warn().Str("source", src.Name).Int("status", resp.StatusCode).Str("reason", transportError(err)).
			Msg("shadow forward: the answer's body was not read; its status is relayed without it")
		ans.BodyDropped = true
	case len(body) > MaxShadowReplyBytes:
		ans.BodyDropped = true
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	default:
		ans.Body = body
	}
	return ans
}

// shadowFailed is the answer of a forward that got none.
func (in *Inbox) shadowFailed(src *sources.Source, err error) ShadowAnswer {
	f := ShadowUnreachable
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		f = ShadowTimeout
	}
	in.log.Warn().Str("source", src.Name).Str("failure", string(f)).Str("reason", transportError(err)).
		Msg("shadow forward got no answer")
	return ShadowAnswer{Failure: f}
}

// shadowReason is the forward's outcome as a claim's result_ref (2xx) or
// last_error.
func shadowReason(src *sources.Source, ans ShadowAnswer) string {
	switch ans.Failure {
	case ShadowTimeout:
		return fmt.Sprintf("forward: no answer within forward.timeout_seconds (%d)", int(src.Forward.Timeout/time.Second))
	case ShadowUnreachable:
		return "forward: forward.url unreachable"
	}
	return "forward: HTTP " + strconv.Itoa(ans.Status)
}

// shadowSettle settles the claims of ans that would have won (they carry
// the claim token) by the forward's answer: complete on a 2xx, fail
// retryable otherwise. It runs even when ctx has ended (the answer is
// known), bounded by recordTimeout. A settle fenced by its token changes
// nothing: a record an enforcing door adopted after the lease ended has
// no token (it is received, to be dispatched), so the settle is logged as
// not made and the dispatch decides.
func (in *Inbox) shadowSettle(ctx context.Context, src *sources.Source, ans *ShadowAnswer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	reason := shadowReason(src, *ans)
	ok := ans.Failure == "" && ans.Status >= 200 && ans.Status < 300
	for i, r := range ans.Results {
		if r.WouldBe != claim.Won || r.Token == "" {
			continue
		}
		var rec claim.Record
		var err error
		if ok {
			rec, err = in.ledger.Complete(ctx, r.Tenant, r.ID, r.Token, reason)
		} else {
			rec, err = in.ledger.Fail(ctx, r.Tenant, r.ID, r.Token, claim.Retryable, reason)
		}
		if err != nil {
			in.log.Warn().Err(err).Str("source", src.Name).Str("claim_id", r.ID).Str("forward", reason).
				Msg("shadow claim not settled by its forward's answer; its lease ends it as its lease policy says")
			continue
		}
		ans.Results[i].Record = rec
	}
}
