// Package strictjson decodes JSON strictly and writes it in one exact
// canonical form, for every document that feeds an identity, an idempotency
// key or a payload hash.
//
// The contract, above all: two different events never share a canonical
// form (so never a key or hash), and two copies of one event never get two.
// A document that different JSON parsers could read differently is
// therefore refused, never repaired.
//
// # Strict decoding
//
// Parse, ParseDoc, Unmarshal, Canonical, Hash and HashWithout accept
// exactly one JSON value (RFC 8259) and fail with an *Error otherwise:
//   - a duplicate member name in any object, compared after unescaping
//     ("a" and "\u0061" are the same name): ReasonDuplicateName;
//   - bytes that are not UTF-8, in strings, names or anywhere else:
//     ReasonInvalidUTF8. Nothing is replaced with U+FFFD; a literal U+FFFD
//     (EF BF BD or \ufffd) is an ordinary character;
//   - a \u escape of half a UTF-16 surrogate pair ("\ud800", "\udc00",
//     "\ud83dx"): ReasonSurrogate;
//   - empty input, anything but whitespace after the value
//     (ReasonTrailing), a leading byte order mark (ReasonBOM; see TrimBOM),
//     input over MaxBytes, nesting over MaxDepth, a number beyond
//     MaxExponent.
//
// Every function reads the document first with this package's own
// scanner (one pass, eight bytes at a time through strings and digits);
// a document the scanner refuses is read again with
// github.com/go-json-experiment/json's jsontext, which reports the error
// (reason, pointer, offset). Unmarshal then decodes with
// go-json-experiment/json; it also refuses member names that differ from a
// struct field's name only in letter case, and with RejectUnknown any
// member that is no field.
//
// # Canonical form
//
// Canonical is RFC 8785 (JSON Canonicalization Scheme, JCS) with one
// departure, for numbers:
//   - object members sorted by the UTF-16 code units of their names
//     (§3.2.3), arrays in order, no whitespace;
//   - strings as §3.2.2.2: only '"', '\\' and U+0000–U+001F escaped, as
//     \b \t \n \f \r or \u00xx (lowercase hex); everything else raw UTF-8,
//     no Unicode normalisation;
//   - true, false, null;
//   - numbers by their EXACT decimal value (see below).
//
// Why numbers depart from JCS: JCS reads every number as an IEEE-754 double
// and writes the shortest text that reads back as that double. Integers
// above 2^53 and long decimals then collapse: 9007199254740993 and
// 9007199254740992 both become "9007199254740992", so two different events
// (two order ids, two amounts) would share a hash. Here a number literal is
// read as sign, decimal digits and exponent, never converted to binary
// floating point: leading and trailing zeros of the digits are dropped,
// zero in any spelling (-0, 0.0, 0e5) is "0", and the result is written in
// the layout ECMAScript Number::toString (and so JCS) uses, for the k
// digits s and decimal point position n (value = 0.s × 10^n):
//
//	k ≤ n ≤ 21      s followed by n−k zeros          1e2 → 100
//	0 < n ≤ 21      s with '.' after n digits        4.50 → 4.5
//	−6 < n ≤ 0      "0." then −n zeros then s        2e-3 → 0.002
//	otherwise       d[.ddd]e±(n−1)                   1E30 → 1e+30, 1.5e-7
//
// The output always denotes exactly the input's value, so two numbers get
// the same text if and only if they are equal: 1.0, 1 and 1e0 agree, and
// 2^53, 2^53+1, 2^63−1, 2^63 and 2^63+1 all stay distinct. For every literal
// that is the shortest round-trip spelling of a double (what JSON encoders
// write, strconv.FormatFloat(f, 'g', -1, 64) style), the output equals
// JCS's; it differs only where the input carries more digits than a double
// holds (JCS turns 333333333.33333329 into 333333333.3333333; here it stays
// 333333333.33333329). The cost of a number is linear in its length, never
// in its exponent (1e999999999 is "1e+999999999"); a value beyond
// 10^±MaxExponent in scientific notation is refused.
//
// CanonicalValue writes a tree as Parse returns it (after a caller removed
// members, say), Hash is the hex SHA-256 of Canonical, HashWithout and
// CanonicalWithout leave out the values a list of pointers name (a
// payload's volatile fields) without building a tree, and CanonicalNumber
// canonicalises one literal. ParseDoc reads a document to look values up
// by pointer (Doc.Get) as Pointer.Get does on its Parse tree; UnmarshalDoc
// is Unmarshal that keeps such a Doc, and Doc.HashAt hashes a value in it
// (a request's payload) as HashWithout hashes that value's bytes, without
// reading them again.
//
// # Cost
//
// Canonical, Hash, HashWithout, CanonicalWithout, ParseDoc, Doc.HashAt and
// Unmarshal's strict pass take time linear in the input and make no
// allocation per value: besides the input (and Canonical's result) they hold about 36
// bytes per object member (a node for it, one for its value, its place
// among the object's children) and 20 per array, never anything per
// element of an array of scalars; Hash writes SHA-256 in 32 KiB pieces
// rather than holding the canonical form. Parse and CanonicalValue build
// or walk a tree of Go values, an allocation per value.
package strictjson
