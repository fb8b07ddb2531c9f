package driveropt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// NeverConnected reports an error that means no connection was made: the address was
// refused or did not resolve, the dial failed, or the TLS handshake did. Nothing was sent.
func NeverConnected(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	var unknownAuthority x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &dns), errors.As(err, &unknownAuthority), errors.As(err, &badHost),
		errors.As(err, &verify), errors.As(err, &record):
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// LostConnection reports an error that means a driver did not get to talk to its server:
// it never connected (NeverConnected), or the connection it had was reset or closed under
// it before an answer came. Drivers whose protocol sends nothing the server acts on before
// its answer classify such an error as unreachable.
func LostConnection(err error) bool {
	return NeverConnected(err) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}
