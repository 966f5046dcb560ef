package sources

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"mime"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
	"github.com/idempotent-claim/idempotent-claim/sidecar/verify"
)

// receiptHash is the payload hash of one event as this source sees it
// (the receipt view, compared with the provider's redeliveries): for a JSON
// payload the SHA-256 of its exact canonical form (strictjson) without the
// source's volatile fields, for other content (form bodies, binary data) the
// SHA-256 of the raw bytes. A leading UTF-8 BOM is ignored (RFC 8259 §8.1).
// A payload that is JSON but not strict JSON (duplicate or case-variant
// names, invalid UTF-8, unpaired surrogates) is an authenticated
// *verify.Error: ambiguous input is refused, never hashed some other way.
func (s *Source) receiptHash(contentType string, payload []byte) (string, error) {
	content, err := s.hashedContent(contentType, payload)
	if err != nil {
		return "", err
	}
	content = strictjson.TrimBOM(content)
	if !LooksJSON(contentType, content) {
		sum := sha256.Sum256(content)
		return hex.EncodeToString(sum[:]), nil
	}
	h, err := claim.PayloadHash(content, s.volatile...) // the claims API's hash: one view of a payload
	if notJSON(err) {
		// Not JSON at all (a signed test string, a truncated body): the
		// raw bytes are its only exact identity.
		sum := sha256.Sum256(content)
		return hex.EncodeToString(sum[:]), nil
	}
	if err != nil {
		return "", bodyError(err)
	}
	return h, nil
}

// notJSON reports whether a strict-decoding error says the content is not
// JSON at all (its grammar fails), as opposed to JSON that is ambiguous
// (duplicate names, invalid UTF-8, unpaired surrogates) or beyond what can
// be canonicalised exactly (too deep, numbers out of range), which is
// refused.
func notJSON(err error) bool {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Reason {
	case strictjson.ReasonSyntax, strictjson.ReasonTruncated, strictjson.ReasonTrailing, strictjson.ReasonEmpty:
		return true
	}
	return false
}

// LooksJSON reports whether content is to be hashed as JSON: a JSON media
// type (application/json, any +json) or a body that starts, after
// whitespace, with '{' or '['. The dispatcher forwards such a body without
// a leading BOM.
func LooksJSON(contentType string, content []byte) bool {
	if isJSONType(contentType) {
		return true
	}
	t := strings.TrimLeft(string(content[:min(len(content), 64)]), " \t\r\n")
	return strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")
}

// hashedContent is the part of an event's payload that its payload hash
// covers. For CloudEvents it is the event's data, so the same event sent in
// binary mode (the body is the data) and in structured mode (the body is
// the whole event, data inside) is a duplicate, not a conflict: (source,
// id) identify the event and data is its content (CloudEvents spec §3.1).
// In structured mode data is a JSON value, or, for a non-JSON
// datacontenttype, a string holding the data itself (JSON event format
// §3.1), or data_base64. It tests the provider type itself, the one place
// outside sidecar/verify that does: the rule is the CloudEvents event
// format's, applied to the stored payload when it is hashed (a verifier
// only proves and names events), and no other provider has two encodings
// of one event.
func (s *Source) hashedContent(contentType string, payload []byte) ([]byte, error) {
	structured := strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "application/cloudevents")
	if s.Provider != verify.TypeCloudEvents || !structured {
		return payload, nil // binary mode: the body is the data
	}
	var e struct {
		Data            jsontext.Value `json:"data"`
		DataBase64      *string        `json:"data_base64"`
		DataContentType string         `json:"datacontenttype"`
	}
	if err := strictjson.Unmarshal(strictjson.TrimBOM(payload), &e); err != nil {
		return nil, bodyError(err)
	}
	switch {
	case len(e.Data) > 0:
		mt, _, _ := mime.ParseMediaType(e.DataContentType)
		jsonData := e.DataContentType == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
		if e.Data.Kind() == '"' && !jsonData {
			var text string
			if err := strictjson.Unmarshal(e.Data, &text); err != nil {
				return nil, bodyError(err)
			}
			return []byte(text), nil
		}
		return e.Data, nil
	case e.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*e.DataBase64)
		if err != nil {
			return nil, &verify.Error{Code: verify.CodeMalformedBody, In: verify.InBody, Field: "/data_base64",
				Reason: "is not valid base64", Authenticated: true}
		}
		return b, nil
	}
	return payload, nil
}

// isJSONType reports whether a media type is JSON (application/json or
// any +json type).
func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
