package verify

import "errors"

// splitBatch returns the Result of a delivery that carries several items:
// item(i, it) gives the event of item i or the error item i fails with on
// its own. Items that fail are listed in Result.Rejected by their index in
// items, the others in Result.Events, in order. When every item fails the
// delivery fails as a whole with the first item's error (as
// Result.Rejected documents). items is not empty: each provider refuses an
// empty batch with its own error first.
func splitBatch[T any](items []T, item func(i int, it T) (Event, error)) (Result, error) {
	return split(items, item, false)
}

// splitSelfAuthBatch is splitBatch for a batch whose items are
// authenticated each on its own (Adyen's per-item HMAC, Microsoft Graph's
// clientState), not by one signature over the body: an item that JSON
// decoders would read differently (an ambiguous *[Error]) fails the whole
// delivery at once, so an item that may be authentic is never dropped
// while the others are acknowledged.
func splitSelfAuthBatch[T any](items []T, item func(i int, it T) (Event, error)) (Result, error) {
	return split(items, item, true)
}

func split[T any](items []T, item func(i int, it T) (Event, error), ambiguousFailsAll bool) (Result, error) {
	var res Result
	for i, it := range items {
		ev, err := item(i, it)
		if err != nil {
			var e *Error
			if ambiguousFailsAll && errors.As(err, &e) && e.ambiguous {
				return Result{}, err
			}
			res.Rejected = append(res.Rejected, ItemError{Index: i, Err: err})
			continue
		}
		res.Events = append(res.Events, ev)
	}
	if len(res.Events) == 0 {
		return Result{}, res.Rejected[0].Err
	}
	return res, nil
}
