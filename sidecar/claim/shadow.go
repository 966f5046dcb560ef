package claim

// Shadow mode: observe only.
//
// A shadow claim (Request.Shadow, or any claim of a source whose policy is
// in shadow, Policy.Shadow) runs the real decision on the real record,
// with the same statement as any other claim: a duplicate leaves the
// record as a duplicate would, a conflict is counted, an in_progress copy
// changes nothing, a win takes the lease. Only its delivery-log entry is
// marked (claim_deliveries.shadow, migration 00017) and its answer
// differs: Won, so that the caller proceeds exactly as it would without
// the layer, with WouldBe the decision and Cause the cause logged with a
// copy. Because the records are real, enforcing the source later decides
// its next copy against everything seen in shadow: no gap, no import.

// ShadowObserver is an Observer that is also told every shadow decision:
// source is the record's source (the scope), wouldBe the decided outcome.
type ShadowObserver interface {
	ShadowDecided(source string, wouldBe Outcome)
}

// shadowed returns r with Shadow set when its source's policy is in
// shadow.
func (l *Ledger) shadowed(r Request) Request {
	if !r.Shadow && l.Policy(r.Source).Shadow {
		r.Shadow = true
	}
	return r
}

// shadowedAll is shadowed of each of reqs, in a new slice when any
// changes (the caller's is left as it is).
func (l *Ledger) shadowedAll(reqs []Request) []Request {
	var out []Request
	for i, r := range reqs {
		if s := l.shadowed(r); s.Shadow != r.Shadow {
			if out == nil {
				out = append([]Request(nil), reqs...)
			}
			out[i] = s
		}
	}
	if out == nil {
		return reqs
	}
	return out
}

// shadowAnswer turns the decided answer res of a shadow claim into the
// answer it gets: Won, WouldBe the decision, the claim token only when the
// decision is Won (a copy holds nothing: there is nothing to settle).
func (l *Ledger) shadowAnswer(res Result) Result {
	res.WouldBe = res.Outcome
	if res.Outcome != Won {
		res.Token = ""
	}
	res.Outcome = Won
	if o, ok := l.obs.(ShadowObserver); ok {
		o.ShadowDecided(res.Source, res.WouldBe)
	}
	return res
}
