// Package driveropt holds the value types and checks that the options of several
// drivers share: a Secret that never prints its value, TLS client settings, and a
// Checker that collects every problem with a set of options at once. It is internal to
// outboxd.
//
// Invariants: it imports nothing of outboxd, so a driver can be built and tested
// without outboxd's configuration; a Secret's value leaves it only through Reveal, and no
// message a Checker records quotes a secret.
package driveropt
