package httpapi

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/go-playground/validator/v10"
	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
	"github.com/idempotent-claim/idempotent-claim/sidecar/strictjson"
)

// maxKeyParts is the most parts a claim's key_parts may hold.
const maxKeyParts = 32

// limitTags are the validate tags of the request bodies' upper limits:
// each stands for the rule max=N with N the constant that states the
// limit (the claim package's for what the ledger keeps, this package's
// for the rest), so that a request struct names a limit and never copies
// its number. A string's limit counts characters, a slice's items, an
// integer's value. openapi.yaml states the same numbers;
// TestOpenAPIFieldLimits checks each against the tag of its field.
var limitTags = map[string]int{
	"max_source":         claim.MaxSourceLen,
	"max_event_id":       claim.MaxEventIDLen,
	"max_key_parts":      maxKeyParts,
	"max_event_type":     claim.MaxEventTypeLen,
	"max_action":         claim.MaxActionLen,
	"max_object_id":      claim.MaxObjectIDLen,
	"max_execution_id":   claim.MaxExecIDLen,
	"max_request_id":     claim.MaxRequestIDLen,
	"max_execution_mode": claim.MaxExecutionModeLen,
	"max_result_ref":     claim.MaxResultRefLen,
	"max_error":          claim.MaxErrorLen,
	"max_note":           claim.MaxNoteLen,
	"max_wait_seconds":   int(claim.MaxWait / time.Second),
	"max_headers":        MaxTriggerHeaders,
	"max_query":          MaxTriggerQueryBytes,
}

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	for tag, n := range limitTags {
		v.RegisterAlias(tag, "max="+strconv.Itoa(n))
	}
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	return v
}

// decodeBody decodes the request body of c into dst (see decode).
func (s *Server) decodeBody(c *fiber.Ctx, dst any) error {
	body, err := s.body(c)
	if err != nil {
		return err
	}
	return s.decode(body, dst, "")
}

// decodeBodyDoc is decodeBody that also returns the body as read
// (decodeDoc).
func (s *Server) decodeBodyDoc(c *fiber.Ctx, dst any) (*strictjson.Doc, error) {
	body, err := s.body(c)
	if err != nil {
		return nil, err
	}
	return s.decodeDoc(body, dst, "")
}

// body returns the request body, decoded per Content-Encoding (gzip,
// deflate, br; RFC 9110 section 8.4) with BodyLimit applied to the DECODED
// size. Fiber's Ctx.Body decodes without any bound, so a small compressed
// body could expand far past the limit (and it answers a decoding failure
// as if it were the body). Errors: Malformed for an unsupported or corrupt
// encoding, TooLarge past the limit.
func (s *Server) body(c *fiber.Ctx) ([]byte, error) {
	return s.bodyWithin(c, s.cfg.BodyLimit)
}

// bodyWithin is body with limit, in bytes, in place of BodyLimit.
func (s *Server) bodyWithin(c *fiber.Ctx, limit int) ([]byte, error) {
	raw := c.Request().Body()
	var zr io.Reader
	var err error
	switch enc := strings.ToLower(strings.TrimSpace(c.Get(fiber.HeaderContentEncoding))); enc {
	case "", "identity":
		return raw, nil
	case "gzip", "x-gzip":
		zr, err = gzip.NewReader(bytes.NewReader(raw))
	case "deflate":
		zr, err = zlib.NewReader(bytes.NewReader(raw))
	case "br":
		zr = brotli.NewReader(bytes.NewReader(raw))
	default:
		return nil, &apperr.Error{Code: apperr.Malformed, Field: fiber.HeaderContentEncoding,
			Message: "must be one of identity, gzip, deflate, br"}
	}
	if err != nil {
		return nil, &apperr.Error{Code: apperr.Malformed, Field: fiber.HeaderContentEncoding,
			Message: "the body does not match its content encoding", Err: err}
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, &apperr.Error{Code: apperr.Malformed, Field: fiber.HeaderContentEncoding,
			Message: "the body does not match its content encoding", Err: err}
	}
	if len(out) > limit {
		return nil, apperr.New(apperr.TooLarge, "the decoded request body exceeds %d bytes", limit)
	}
	return out, nil
}

// decode reads one JSON object from body into dst strictly (package
// strictjson): unknown, duplicate and case-variant member names, invalid
// UTF-8, unpaired surrogates and trailing data are errors, anywhere in the
// body (payload and key_fields included); then it validates dst. Errors
// name the field; prefix is prepended to field names (e.g. "claims[3].").
func (s *Server) decode(body []byte, dst any, prefix string) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return apperr.New(apperr.Malformed, "the request body must be a JSON object")
	}
	if err := strictjson.Unmarshal(body, dst, strictjson.RejectUnknown()); err != nil {
		return jsonError(err, prefix)
	}
	return s.check(dst, prefix)
}

// decodeDoc is decode that also returns the body as read
// (strictjson.UnmarshalDoc), to hash a payload in it without reading the
// payload again. body must not change while the Doc is used; the caller
// releases it (Doc.Release) when done.
func (s *Server) decodeDoc(body []byte, dst any, prefix string) (*strictjson.Doc, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, apperr.New(apperr.Malformed, "the request body must be a JSON object")
	}
	doc, err := strictjson.UnmarshalDoc(body, dst, strictjson.RejectUnknown())
	if err != nil {
		return nil, jsonError(err, prefix)
	}
	if err := s.check(dst, prefix); err != nil {
		doc.Release()
		return nil, err
	}
	return doc, nil
}

// check validates a decoded struct with its `validate` tags.
func (s *Server) check(v any, prefix string) error {
	err := s.validate.Struct(v)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) || len(verrs) == 0 {
		return fmt.Errorf("validate: %w", err)
	}
	fe := verrs[0]
	field := prefix + fieldPath(fe.Namespace())
	return apperr.Field(field, "%s", describe(fe))
}

// fieldPath drops the struct name from a validator namespace ("claimBody.source").
func fieldPath(ns string) string {
	_, rest, ok := strings.Cut(ns, ".")
	if !ok {
		return ns
	}
	return rest
}

// describe says what a failed rule requires; a limit tag is described as
// the max rule it stands for.
func describe(fe validator.FieldError) string {
	switch fe.ActualTag() {
	case "required":
		return "is required"
	case "max":
		if fe.Kind() == reflect.String {
			return "must be at most " + fe.Param() + " bytes"
		}
		if fe.Kind() == reflect.Slice {
			return "must have at most " + fe.Param() + " items"
		}
		return "must be at most " + fe.Param()
	case "min":
		if fe.Kind() == reflect.Slice {
			return "must have at least " + fe.Param() + " items"
		}
		return "must be at least " + fe.Param()
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "uuid":
		return "must be a UUID"
	case "len":
		return "must be exactly " + fe.Param() + " characters"
	case "hexadecimal", "lowercase":
		return "must be lowercase hexadecimal"
	}
	return "is invalid (" + fe.ActualTag() + ")"
}

// jsonError turns a strict-decoding failure into a Malformed error naming
// the field: the JSON pointer of the failure without its leading '/'
// ("event_id", "payload/items/0"), after prefix. Nothing of the body's
// values is repeated.
func jsonError(err error, prefix string) error {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return apperr.New(apperr.Malformed, "the request body is not a valid JSON object")
	}
	switch se.Reason {
	case strictjson.ReasonSyntax, strictjson.ReasonTruncated, strictjson.ReasonTrailing, strictjson.ReasonEmpty:
		// Not JSON at all: there is no field to name, only a place.
		return &apperr.Error{Code: apperr.Malformed, Err: err,
			Message: fmt.Sprintf("the request body is not a valid JSON object: %s (at byte %d)", se.Reason, se.Offset)}
	}
	field := prefix + strings.TrimPrefix(se.Pointer, "/")
	if se.Pointer == "" {
		field = strings.TrimSuffix(prefix, ".")
	}
	return &apperr.Error{Code: apperr.Malformed, Field: field, Message: se.Reason, Err: err}
}
