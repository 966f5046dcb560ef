package httpapi

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// The wire contract, Go against openapi.yaml, without a database: the
// error codes and their statuses, and the limits of the request fields.

func contractDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI())
	require.NoError(t, err, "openapi.yaml does not parse")
	require.NoError(t, doc.Validate(context.Background()), "openapi.yaml is not a valid OpenAPI document")
	return doc
}

// notOnTheAPI are the codes of errorStatus that no route of openapi.yaml
// answers, and why.
var notOnTheAPI = map[apperr.Code]string{
	apperr.Forbidden: "the console's refusal of a form (an HTML page, not the JSON API)",
}

// answeredOutsideErrorStatus are the codes a route answers with its own
// status rather than through errorStatus (the shadow pass-through's).
var answeredOutsideErrorStatus = map[apperr.Code]int{
	codeBadGateway:     fiber.StatusBadGateway,
	codeGatewayTimeout: fiber.StatusGatewayTimeout,
}

// apperrCodes are the values of the Code constants declared in package
// apperr, read from its source so that a code added there is seen here.
func apperrCodes(t *testing.T) []apperr.Code {
	t.Helper()
	files, err := filepath.Glob("../apperr/*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var out []apperr.Code
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "apperr: a Code constant that is not a string literal")
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out = append(out, apperr.Code(s))
				}
			}
		}
	}
	require.NotEmpty(t, out, "no Code constants found in package apperr")
	return out
}

// documentedStatuses is the x-status map of the ErrorCode schema: the
// HTTP status of each code, which the node's tests read too.
func documentedStatuses(t *testing.T, doc *openapi3.T) (enum []string, statuses map[string]int, description string) {
	t.Helper()
	s := doc.Components.Schemas["ErrorCode"]
	require.NotNil(t, s, "openapi.yaml has no ErrorCode schema")
	for _, v := range s.Value.Enum {
		enum = append(enum, v.(string))
	}
	raw, err := json.Marshal(s.Value.Extensions["x-status"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &statuses), "ErrorCode's x-status must map each code to its status")
	return enum, statuses, s.Value.Description
}

// TestOpenAPIErrorCodes checks the error codes three ways: every Code of
// package apperr has a status in errorStatus; the codes claimd answers
// on its API are the ErrorCode enum of openapi.yaml with the statuses of
// its x-status (and of its description); and each operation's documented
// error responses allow only codes of their status.
func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	doc := contractDoc(t)

	for _, code := range apperrCodes(t) {
		_, ok := errorStatus[code]
		require.True(t, ok, "apperr.%s has no status in errorStatus (it would be answered 500 internal)", code)
	}
	answered := map[string]int{}
	for code, status := range errorStatus {
		if _, skip := notOnTheAPI[code]; !skip {
			answered[string(code)] = status
		}
	}
	for code, status := range answeredOutsideErrorStatus {
		answered[string(code)] = status
	}

	enum, statuses, description := documentedStatuses(t, doc)
	require.ElementsMatch(t, slices.Sorted(maps.Keys(answered)), enum,
		"codes claimd answers on its API (left) vs the ErrorCode enum of openapi.yaml (right)")
	require.Equal(t, answered, statuses, "statuses of claimd's codes (left) vs ErrorCode's x-status in openapi.yaml (right)")

	said := map[string]int{}
	for _, m := range regexp.MustCompile("`([a-z_]+)` ([1-5][0-9][0-9])\\b").FindAllStringSubmatch(description, -1) {
		said[m[1]], _ = strconv.Atoi(m[2])
	}
	require.Equal(t, statuses, said, "ErrorCode's x-status (left) vs the statuses its description states (right)")

	// Each error response of each operation narrows the codes it may
	// carry; each must be a code of that response's status.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for key, resp := range op.Responses.Map() {
				status, err := strconv.Atoi(key)
				if err != nil || status < 400 {
					continue
				}
				if resp.Ref == "#/components/responses/IngestUnauthenticated" {
					// The source's unauthenticated_status (400 or 403) answers unauthorized.
					continue
				}
				for _, code := range errorCodesOf(resp.Value) {
					require.Equal(t, statuses[code], status,
						"%s %s documents %s under %d; ErrorCode's x-status says %d", method, path, code, status, statuses[code])
				}
			}
		}
	}
}

// errorCodesOf returns the codes an error response narrows error.code to.
func errorCodesOf(resp *openapi3.Response) []string {
	if resp == nil || resp.Content["application/json"] == nil {
		return nil
	}
	var out []string
	var walk func(s *openapi3.SchemaRef, depth int)
	walk = func(s *openapi3.SchemaRef, depth int) {
		if s == nil || s.Value == nil {
			return
		}
		for _, sub := range s.Value.AllOf {
			walk(sub, depth)
		}
		if depth == 0 {
			walk(s.Value.Properties["error"], 1)
			return
		}
		if code := s.Value.Properties["code"]; code != nil && code.Ref == "" {
			for _, v := range code.Value.Enum {
				out = append(out, v.(string))
			}
		}
	}
	walk(resp.Content["application/json"].Schema, 0)
	return out
}

// requestSchemas names the openapi.yaml schema of each request body:
// a component, or a path into one ("Name/property/items").
var requestSchemas = map[reflect.Type]string{
	reflect.TypeFor[claimBody]():             "ClaimRequest",
	reflect.TypeFor[completeBody]():          "CompleteRequest",
	reflect.TypeFor[failBody]():              "FailRequest",
	reflect.TypeFor[extendBody]():            "ExtendRequest",
	reflect.TypeFor[resolveBody]():           "ResolveRequest",
	reflect.TypeFor[releaseBody]():           "ReleaseRequest",
	reflect.TypeFor[completeItem]():          "CompleteBatchItem",
	reflect.TypeFor[failItem]():              "FailBatchItem",
	reflect.TypeFor[failExecutionBody]():     "FailExecutionRequest",
	reflect.TypeFor[reconcileBody]():         "ReconcileRequest",
	reflect.TypeFor[triggerBody]():           "TriggerRequest",
	reflect.TypeFor[executionWorkflowBody](): "ExecutionWorkflowRequest",
	reflect.TypeFor[executionWorkflowItem](): "ExecutionWorkflowRequest/executions/items",
}

// limitsCheckedInCode are the upper limits of request fields that are no
// validate tag: checked by the ledger or the handler, stated by these
// constants. Keyed by schema path and property.
var limitsCheckedInCode = map[string]int{
	"ClaimRequest.workflow_id":                                   claim.MaxWorkflowFieldLen,
	"ClaimRequest.workflow_version":                              claim.MaxWorkflowFieldLen,
	"TriggerRequest.workflow_id":                                 claim.MaxWorkflowFieldLen,
	"TriggerRequest.workflow_version":                            claim.MaxWorkflowFieldLen,
	"ExecutionWorkflowRequest.executions":                        maxExecutionWorkflows,
	"ExecutionWorkflowRequest/executions/items.execution_id":     claim.MaxExecIDLen,
	"ExecutionWorkflowRequest/executions/items.workflow_id":      claim.MaxWorkflowFieldLen,
	"ExecutionWorkflowRequest/executions/items.workflow_version": claim.MaxWorkflowFieldLen,
	// A header line is a [name, value] pair.
	"TriggerRequest/headers/items.": 2,
}

// schemaAt resolves a requestSchemas path.
func schemaAt(t *testing.T, doc *openapi3.T, path string) *openapi3.Schema {
	t.Helper()
	parts := strings.Split(path, "/")
	ref := doc.Components.Schemas[parts[0]]
	require.NotNil(t, ref, "openapi.yaml has no schema %s", parts[0])
	s := ref.Value
	for i := 1; i < len(parts); i++ {
		if parts[i] == "items" {
			require.NotNil(t, s.Items, "%s: no items", path)
			s = s.Items.Value
			continue
		}
		p := s.Properties[parts[i]]
		require.NotNil(t, p, "%s: no property %s", path, parts[i])
		s = p.Value
	}
	return s
}

// upperLimit is the limit a schema states for a value of kind k.
func upperLimit(s *openapi3.Schema, k reflect.Kind) (int, bool) {
	switch k {
	case reflect.String:
		if s.MaxLength != nil {
			return int(*s.MaxLength), true
		}
	case reflect.Slice:
		if s.MaxItems != nil {
			return int(*s.MaxItems), true
		}
	default:
		if s.Max != nil {
			return int(*s.Max), true
		}
	}
	return 0, false
}

// TestOpenAPIFieldLimits checks that the request bodies state each
// upper limit once, as a limit tag (limitTags: the Go constant) or in
// code (limitsCheckedInCode), never as a number of their own, and that
// openapi.yaml documents the same number for the field, and no limit
// that Go does not have.
func TestOpenAPIFieldLimits(t *testing.T) {
	t.Parallel()
	doc := contractDoc(t)
	tied := map[string]bool{}
	for typ, path := range requestSchemas {
		schema := schemaAt(t, doc, path)
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			prop := schema.Properties[name]
			require.NotNil(t, prop, "%s.%s (%s) is not in openapi.yaml's %s", typ.Name(), f.Name, name, path)
			where, kind := path+"."+name, f.Type.Kind()
			if kind == reflect.Pointer {
				kind = f.Type.Elem().Kind()
			}
			s := prop.Value
			for rule := range strings.SplitSeq(f.Tag.Get("validate"), ",") {
				require.False(t, strings.HasPrefix(rule, "max="),
					"%s.%s: validate tag %q: name the limit (a limitTags tag) instead of a number", typ.Name(), f.Name, rule)
				if rule == "dive" {
					where, kind, s = path+"/"+name+"/items.", f.Type.Elem().Kind(), s.Items.Value
					continue
				}
				if rule == "min=0" || rule == "min=1" {
					got, ok := lowerLimit(s, kind)
					require.True(t, ok && got == rule[len("min="):], "%s: validate %s, openapi.yaml states %q", where, rule, got)
				}
				n, ok := limitTags[rule]
				if !ok {
					continue
				}
				got, ok := upperLimit(s, kind)
				require.True(t, ok, "%s: Go limits it to %d (%s), openapi.yaml states no limit", where, n, rule)
				require.Equal(t, n, got, "%s: Go limit %s (left) vs openapi.yaml (right)", where, rule)
				tied[where] = true
			}
		}
	}
	for where, n := range limitsCheckedInCode {
		path, name, _ := strings.Cut(where, ".")
		s := schemaAt(t, doc, path)
		kind := reflect.String
		if name == "" {
			kind = reflect.Slice
		} else {
			s = s.Properties[name].Value
			if s.Type.Is(openapi3.TypeArray) {
				kind = reflect.Slice
			}
		}
		got, ok := upperLimit(s, kind)
		require.True(t, ok, "%s: Go limits it to %d, openapi.yaml states no limit", where, n)
		require.Equal(t, n, got, "%s: Go limit (left) vs openapi.yaml (right)", where)
		tied[where] = true
	}
	// Every upper limit openapi.yaml states on these bodies is Go's.
	for _, path := range requestSchemas {
		for name, prop := range schemaAt(t, doc, path).Properties {
			limited := map[string]*openapi3.Schema{path + "." + name: prop.Value}
			if prop.Value.Items != nil {
				limited[path+"/"+name+"/items."] = prop.Value.Items.Value
			}
			for where, s := range limited {
				_, str := upperLimit(s, reflect.String)
				_, slice := upperLimit(s, reflect.Slice)
				_, num := upperLimit(s, reflect.Int)
				if (str || slice || num) && !tied[where] {
					t.Errorf("%s: openapi.yaml states a limit that no Go constant states (limitTags or limitsCheckedInCode)", where)
				}
			}
		}
	}
}

// lowerLimit is the lower limit a schema states for a value of kind k,
// as a number in text.
func lowerLimit(s *openapi3.Schema, k reflect.Kind) (string, bool) {
	switch k {
	case reflect.String:
		return strconv.FormatUint(s.MinLength, 10), true
	case reflect.Slice:
		return strconv.FormatUint(s.MinItems, 10), true
	default:
		if s.Min != nil {
			return strconv.FormatFloat(*s.Min, 'f', -1, 64), true
		}
	}
	return "", false
}

// TestLimitTagsAnswerAsMax checks that a limit tag is refused exactly as
// the max rule it stands for: 422 invalid naming the field, saying the
// limit, quoting nothing of the value.
func TestLimitTagsAnswerAsMax(t *testing.T) {
	t.Parallel()
	s := &Server{validate: newValidator()}
	long := func(n int) string { return strings.Repeat("\u00e9", n) }
	over := claim.MaxWait/time.Second + 1
	wait := int(over)
	for _, c := range []struct {
		body         any
		prefix       string
		field, reply string
	}{
		{&claimBody{Source: long(claim.MaxSourceLen + 1)}, "", "source", "must be at most 200 bytes"},
		{&claimBody{Source: "s", KeyParts: make([]string, maxKeyParts+1)}, "claims[3].", "claims[3].key_parts", "must have at most 32 items"},
		{&claimBody{Source: "s", KeyParts: []string{"a", long(claim.MaxEventIDLen + 1)}}, "", "key_parts[1]", "must be at most 1024 bytes"},
		{&claimBody{Source: "s", WaitSeconds: &wait}, "", "wait_seconds", "must be at most 25"},
		{&failBody{ClaimToken: "t", Error: long(claim.MaxErrorLen + 1), Retry: "unknown"}, "", "error", "must be at most 4000 bytes"},
		{&triggerBody{Method: "POST", Headers: make([][]string, MaxTriggerHeaders+1)}, "", "headers", "must have at most 256 items"},
		{&reconcileBody{Token: "00000000-0000-4000-8000-000000000000", Verdict: "done", Note: long(claim.MaxNoteLen + 1)}, "", "note", "must be at most 4000 bytes"},
	} {
		err := s.check(c.body, c.prefix)
		e := apperr.As(err)
		require.NotNil(t, e, "%T: %v", c.body, err)
		require.Equal(t, apperr.Invalid, e.Code)
		require.Equal(t, c.field, e.Field)
		require.Equal(t, c.reply, e.Message)
	}
	require.NoError(t, s.check(&claimBody{Source: long(claim.MaxSourceLen), KeyParts: make([]string, maxKeyParts)}, ""),
		"a value at the limit passes")
}
