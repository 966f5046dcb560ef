package sources

import (
	"fmt"

	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// volatileFields are RFC 6901 JSON pointers to fields that a provider
// changes between deliveries of one event (a delivery timestamp, an attempt
// counter). They are left out of the payload hash, so such a redelivery is
// a duplicate, not a conflict (strictjson.HashWithout, through
// claim.PayloadHash). The stored and forwarded body is unchanged.
type volatileFields []strictjson.Pointer

// parseVolatile parses JSON pointers ("/createdAt", "/meta/attempt").
func parseVolatile(ptrs []string) (volatileFields, error) {
	out := make(volatileFields, 0, len(ptrs))
	for i, p := range ptrs {
		ptr, err := strictjson.ParsePointer(p)
		if err != nil || p == "" {
			return nil, fmt.Errorf("volatile_fields[%d]: is not a JSON pointer (RFC 6901), e.g. \"/createdAt\"", i)
		}
		out = append(out, ptr)
	}
	return out, nil
}

// same reports whether two lists name the same fields in the same order.
func (v volatileFields) same(o volatileFields) bool {
	if len(v) != len(o) {
		return false
	}
	for i := range v {
		if v[i].String() != o[i].String() {
			return false
		}
	}
	return true
}
