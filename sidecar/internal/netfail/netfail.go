// Package netfail sorts the error of an HTTP call that got no readable
// answer into a fixed class (timeout, unreachable, dns, tls, unreadable,
// error), so that callers log and count a class and a fixed text, never
// the transport's own message (which quotes the URL, and so may carry a
// credential in its query or user info).
package netfail

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// Classes of a call that got no readable HTTP answer.
const (
	// Timeout: no answer in time (the client's timeout, the context's
	// deadline or the connection's).
	Timeout = "timeout"
	// Unreachable: the connection was refused or reset, or the host or
	// network is unreachable.
	Unreachable = "unreachable"
	// DNS: the host name did not resolve.
	DNS = "dns"
	// TLS: the TLS handshake failed (an untrusted or mismatched
	// certificate, a server that does not speak TLS).
	TLS = "tls"
	// Unreadable: an answer came and could not be read (cut short, not
	// HTTP).
	Unreadable = "unreadable"
	// Other: any other transport failure.
	Other = "error"
)

// Classify sorts a transport error into its class, and reports whether
// trying again may help: a timeout, a refused or reset connection or an
// unreadable answer may pass; a name that does not resolve (unless the
// resolver timed out or called it temporary) or a certificate that is
// refused will not.
func Classify(err error) (class string, retry bool) {
	var dnsErr *net.DNSError
	var recErr tls.RecordHeaderError
	var verErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr):
		return DNS, dnsErr.IsTimeout || dnsErr.IsTemporary
	case errors.As(err, &recErr), errors.As(err, &verErr), errors.As(err, &alert), errors.As(err, &unknownCA),
		errors.As(err, &hostErr), errors.As(err, &invalid), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return TLS, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout, true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ECONNABORTED):
		return Unreachable, true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "malformed HTTP"):
		return Unreadable, true
	}
	return Other, true
}
