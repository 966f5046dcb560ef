package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// DATABASE_URL is read by pgx: a URL (postgres:// or postgresql://) or a
// keyword/value string (host=… dbname=…). checkDatabaseURL refuses, before
// any command connects, a URL-shaped value that pgx would reject with a
// message quoting it, or that would only fail later as an unreachable host
// (a password whose @ or / is not percent-encoded makes part of it the
// host or the port). Its messages name the setting and never quote the
// value: only the scheme, clipped, is echoed, since whatever follows it may
// hold the password. A keyword/value string is left to pgx, which names
// what it cannot read (with the password redacted).

// wantDatabaseURL is the shape every refusal recalls.
const wantDatabaseURL = "want postgres://USER:PASSWORD@HOST:PORT/DATABASE"

// percentHint says how special characters of the user name and password
// are written in a URL.
const percentHint = "percent-encode special characters of the user name and password " +
	"(@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25, a space as %20)"

// checkDatabaseURL reports the first problem of a URL-shaped DATABASE_URL,
// nil for a well-formed postgres:// URL or a keyword/value string.
func checkDatabaseURL(s string) error {
	t := strings.TrimSpace(s)
	scheme, rest, isURL := splitScheme(t)
	if !isURL {
		return nil
	}
	switch {
	case strings.EqualFold(scheme, "jdbc"):
		return errors.New("DATABASE_URL: a JDBC URL is not a PostgreSQL connection URL: drop the jdbc: prefix; " + wantDatabaseURL)
	case strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"):
		if scheme != strings.ToLower(scheme) {
			return fmt.Errorf("DATABASE_URL: the scheme is written in lower case (%s://); %s", strings.ToLower(scheme), wantDatabaseURL)
		}
	default:
		// The scheme is not repeated: what precedes a ':' may be a password.
		return errors.New("DATABASE_URL: unsupported scheme (claimd takes postgres:// or postgresql://); " + wantDatabaseURL)
	}
	switch {
	case !strings.HasPrefix(rest, "//"):
		return fmt.Errorf("DATABASE_URL: not a URL (%s: must be followed by //); %s", strings.ToLower(scheme), wantDatabaseURL)
	case t != s:
		return errors.New("DATABASE_URL: leading or trailing whitespace (a line break at the end of a secret file?): remove it")
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New("DATABASE_URL: a space or a control character inside the URL: " + percentHint +
			"; settings go in the query, ?name=value&name=value")
	}
	return checkURLParts(rest[2:])
}

// splitScheme returns the scheme of s and what follows its colon, and
// whether s starts with a scheme at all (RFC 3986: a letter, then
// letters, digits, +, - or .). A keyword/value string does not: its first
// word holds an = before any colon.
func splitScheme(s string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i < 1 {
		return "", "", false
	}
	for j, c := range s[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	return s[:i], s[i+1:], true
}

// checkURLParts checks what follows postgres://, split as pgx (and libpq)
// split it: the user information ends at the first @ before any /, the
// hosts (a comma-separated list of HOST[:PORT], [IPv6][:PORT]) at the
// first / or ?, the database at ?.
func checkURLParts(p string) error {
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, password, _ := strings.Cut(p[:i], ":")
		if !validEscapes(user) {
			return errors.New("DATABASE_URL: the user name holds a % that does not start a %XX escape: " + percentHint)
		}
		if !validEscapes(password) {
			return errors.New("DATABASE_URL: the password holds a % that does not start a %XX escape: " + percentHint)
		}
		p = p[i+1:]
	}
	netloc, tail := p, ""
	if i := strings.IndexAny(p, "/?"); i >= 0 {
		netloc, tail = p[:i], p[i:]
	}
	var database, query string
	switch {
	case strings.HasPrefix(tail, "/"):
		database, query, _ = strings.Cut(tail[1:], "?")
	case strings.HasPrefix(tail, "?"):
		query = tail[1:]
	}
	hostInQuery, err := checkQuery(query)
	if err != nil {
		return err
	}
	if !validEscapes(database) {
		return errors.New("DATABASE_URL: the database name holds a % that does not start a %XX escape (% as %25)")
	}
	for hp := range strings.SplitSeq(netloc, ",") {
		// An @ after the host list: a / or ? in the password ended the
		// user name and password early.
		if err := checkHostPort(hp, hostInQuery, strings.Contains(tail, "@")); err != nil {
			return err
		}
	}
	return nil
}

// checkHostPort checks one HOST[:PORT] of the host list. An empty host is
// refused (a template whose host variable was empty) unless the query
// names the hosts (?host=/path/of/the/socket/folder).
func checkHostPort(hp string, hostInQuery, cutShort bool) error {
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return errors.New("DATABASE_URL: an IPv6 host address lacks its closing ]; " + wantDatabaseURL)
		}
		host, port = hp[1:end], hp[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return errors.New("DATABASE_URL: an IPv6 host address in [ ] is followed by something other than :PORT; " + percentHint)
		}
		port = strings.TrimPrefix(port, ":")
		if !isIPv6(host) {
			return errors.New("DATABASE_URL: the host in [ ] is not an IPv6 address")
		}
	} else if i := strings.IndexByte(hp, ':'); i >= 0 {
		host, port = hp[:i], hp[i+1:]
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			if cutShort {
				return errors.New("DATABASE_URL: the port is not a number from 1 to 65535 " +
					"(a / in the password ends the user name and password early: " + percentHint + ")")
			}
			return errors.New("DATABASE_URL: the port is not a number from 1 to 65535")
		}
	}
	if strings.HasPrefix(hp, "[") {
		return nil
	}
	if !validEscapes(host) {
		return errors.New("DATABASE_URL: the host holds a % that does not start a %XX escape; " + percentHint)
	}
	host = unescape(host)
	switch {
	case host == "" && !hostInQuery:
		return errors.New("DATABASE_URL: no host (for a Unix socket: ?host=/path/of/its/folder); " + wantDatabaseURL)
	case host == "", strings.HasPrefix(host, "/"):
		return nil // a Unix socket folder, percent-encoded
	case !isHostName(host):
		return errors.New("DATABASE_URL: the host holds a character no host name has (an @ of the password?); " + percentHint)
	}
	return nil
}

// checkQuery checks the NAME=VALUE pairs after ? and reports whether one
// of them names the host.
func checkQuery(q string) (hostInQuery bool, err error) {
	if q == "" {
		return false, nil
	}
	for pair := range strings.SplitSeq(q, "&") {
		name, value, found := strings.Cut(pair, "=")
		if !found || strings.Contains(value, "=") {
			return false, errors.New("DATABASE_URL: a query parameter is not NAME=VALUE (parameters follow ?, joined by &; an = in a value is %3D)")
		}
		if !validEscapes(name) || !validEscapes(value) {
			return false, errors.New("DATABASE_URL: a query parameter holds a % that does not start a %XX escape (% as %25)")
		}
		if unescape(name) == "host" && value != "" {
			hostInQuery = true
		}
	}
	return hostInQuery, nil
}

// validEscapes reports whether every % of s starts a %XX escape other
// than %00 (what pgx decodes).
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) || s[i+1] == '0' && s[i+2] == '0' {
			return false
		}
		i += 2
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// unescape decodes the %XX escapes of s (checked by validEscapes).
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			n, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b.WriteByte(byte(n))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isHostName reports whether s can be a DNS name or an IPv4 address.
func isHostName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// isIPv6 reports whether s can be the inside of [ ]: hex digits, colons,
// dots (an embedded IPv4 address) and a zone after %.
func isIPv6(s string) bool {
	addr, _, _ := strings.Cut(s, "%")
	if !strings.Contains(addr, ":") {
		return false
	}
	for _, c := range addr {
		if !(isHex(byte(c)) && c < 0x80 || c == ':' || c == '.') {
			return false
		}
	}
	return true
}
