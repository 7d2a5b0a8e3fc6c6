// Package compat holds device tests showing that unmodified users of net.Conn
// and net.Listener (net/http with HTTP/1.1 and unencrypted HTTP/2, and
// hashicorp/yamux) run over rnet. It has no code of its own.
package compat
