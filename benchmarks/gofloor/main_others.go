//go:build !linux || !cgo

// Command gofloor measures what the Go runtime alone adds to a busy-polling
// ping-pong against a C twin; it needs Linux and cgo.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gofloor: needs Linux and cgo (build with CGO_ENABLED=1 on Linux)")
	os.Exit(1)
}
