// Package resume holds the wire format and the listener's bookkeeping of
// rnet's resume extension to rsocket v1: the conn-data fields by which a
// dialer and a listener agree to move a connection to another path when its
// queue pair fails, the token that proves a later connection request
// continues an earlier connection, the table in which a listener keeps those
// tokens, and the exchange of received-byte counts with which the two ends
// pick the byte stream up again. docs/design.md, "Resuming a connection on
// another path", is the specification.
//
// Like internal/ring it performs no I/O and starts no goroutines; the only
// clock it reads is the one its Table is given, and the only randomness it
// draws is the tokens' (crypto/rand unless a test says otherwise). Every
// decoder treats its input as a stranger's: it checks each length and range
// and answers a *ProtocolError, never a panic. The encoders' errors are the
// caller's own mistakes, plain errors that are no *ProtocolError.
package resume
