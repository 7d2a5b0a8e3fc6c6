// Package compat holds device tests showing that unmodified users of net.Conn
// and net.Listener (net/http with HTTP/1.1, unencrypted HTTP/2 and HTTP/2
// over TLS, and hashicorp/yamux) run over rnet. It has no code of its own.
package compat
