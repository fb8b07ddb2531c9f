package driveropt

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// LostConnection reports an error that means a driver did not get to talk to its server:
// it could not be dialled, resolved or TLS-verified, or the connection it had was closed
// under it before an answer came. Drivers classify such an error as unreachable.
func LostConnection(err error) bool {
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
	return errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}
