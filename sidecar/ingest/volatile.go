package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// volatileFields are RFC 6901 JSON pointers to fields that a provider
// changes between deliveries of one event (a delivery timestamp, an attempt
// counter). They are left out of the payload hash, so such a redelivery is
// a duplicate, not a conflict. The stored and forwarded body is unchanged.
type volatileFields [][]string

// parseVolatile parses JSON pointers ("/createdAt", "/meta/attempt").
func parseVolatile(ptrs []string) (volatileFields, error) {
	out := make(volatileFields, 0, len(ptrs))
	for i, p := range ptrs {
		if p == "" || p[0] != '/' {
			return nil, fmt.Errorf("volatile_fields[%d]: %q is not a JSON pointer (RFC 6901), e.g. \"/createdAt\"", i, p)
		}
		toks := strings.Split(p[1:], "/")
		for j, t := range toks {
			toks[j] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		out = append(out, toks)
	}
	return out, nil
}

// strip returns body without the volatile fields when body is JSON, or body
// itself (non-JSON bodies, no fields configured).
func (v volatileFields) strip(body []byte) []byte {
	if len(v) == 0 {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // keep number literals exactly for RFC 8785
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return body
	}
	for _, toks := range v {
		remove(doc, toks)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

func remove(doc any, toks []string) {
	for i, t := range toks {
		last := i == len(toks)-1
		switch n := doc.(type) {
		case map[string]any:
			if last {
				delete(n, t)
				return
			}
			doc = n[t]
		case []any:
			idx, err := strconv.Atoi(t)
			if err != nil || idx < 0 || idx >= len(n) {
				return
			}
			if last {
				n[idx] = nil // arrays keep their length: positions stay meaningful
				return
			}
			doc = n[idx]
		default:
			return
		}
	}
}
